"""Tokenizers behind one small interface: byte-level, sentencepiece and HF `tokenizers`.

Every tokenizer has `.encode(text) -> list[int]`, `.decode(ids) -> str`, `.vocab_size`,
`.eos_id`, `.pad_id` and `.name` (a short, filename-safe string used in cache keys; it
changes whenever the vocabulary does). `encode_many(texts)` is the fast path the pipeline
uses to tokenise a whole split.

Specs accepted by `get_tokenizer`:
  byte            ids 0..255 are the UTF-8 bytes, 256 = eos, 257 = pad; vocab_size 258.
  spm:<V>         sentencepiece BPE with V pieces, trained on the train split of the dataset (its
                  first 200M characters, so all of every built-in dataset) and cached as
                  <data_dir>/tokenizers/<dataset key>-spm<V>.model.
  spm_file:<path> an existing sentencepiece .model file.
  hf:<path>       a HF `tokenizers` tokenizer.json file.

Trained sentencepiece models use pad=0, unk=1, bos=2, eos=3, byte fallback (every string
encodes), identity normalisation and no dummy prefix, so decode(encode(s)) == s exactly
(code indentation and newlines included; the one exception is the character U+2581 '▁',
which sentencepiece reserves as its space marker and decodes to a space).
"""
from __future__ import annotations

import hashlib
import io
import os
import re
from typing import Iterable

import numpy as np

from edge_jax.data.errors import DataError
from edge_jax.data.sources import data_dir_default, local_data_dir, resolve, resolve_cfg
from edge_jax.distributed import prepared
from edge_jax.utils.atomic import write_bytes_atomic
from edge_jax.utils.storage import epath, is_remote

# Training input cap: a deterministic subsample of at most this many characters. BPE training
# on 5M characters takes a few seconds on 2 CPU cores and is byte-for-byte reproducible.
SPM_CHAR_BUDGET = 5_000_000
SPM_READ_LIMIT = 40 * SPM_CHAR_BUDGET  # characters read to train spm:<V> (the first ones of a bigger corpus)
_SPM_CHUNK_LINES = 8  # training "sentences" are chunks of 8 lines, so "\n" is seen in context
_SPECS = "byte, spm:<vocab_size>, spm_file:<path.model>, hf:<path/tokenizer.json>"


def _read(path: str) -> bytes:
    """A tokenizer file's bytes, on a disk or in a bucket (an imported base's, in its workdir)."""
    return epath(path).read_bytes()


def _file_hash(path: str) -> str:
    return hashlib.sha1(_read(path)).hexdigest()[:8]


def _safe(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:40]


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then eos=256 and pad=257."""

    vocab_size = 258
    eos_id = 256
    pad_id = 257
    name = "byte"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def decode(self, ids) -> str:
        data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
        return data.decode("utf-8", errors="replace")


class SpmTokenizer:
    """A sentencepiece model (trained here or given as a file)."""

    def __init__(self, model_path: str, name: str):
        import sentencepiece as spm

        self.path = model_path
        self.sp = spm.SentencePieceProcessor(model_proto=_read(model_path))
        self.vocab_size = int(self.sp.get_piece_size())
        self.eos_id = int(self.sp.eos_id())
        if self.eos_id < 0:
            raise DataError(f"sentencepiece model {model_path} has no eos piece; retrain it with "
                            "eos_id set (e.g. spm_train --eos_id=3) or use tokenizer spec 'spm:<V>'")
        pad = int(self.sp.pad_id())
        self.pad_id = pad if pad >= 0 else self.eos_id
        self.name = name

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text))

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int32) for ids in self.sp.encode(list(texts), num_threads=2)]

    def decode(self, ids) -> str:
        return self.sp.decode([int(i) for i in ids])


_EOS_NAMES = ("</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>", "<|im_end|>", "[SEP]", "<|eos|>")
_PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")


class HfTokenizer:
    """A HF `tokenizers` tokenizer.json. eos = the first of the usual end tokens it has; pad =
    its pad token, else eos."""

    def __init__(self, path: str):
        from tokenizers import Tokenizer

        self.path = path
        self.tok = Tokenizer.from_str(_read(path).decode("utf-8"))
        vocab = self.tok.get_vocab(with_added_tokens=True)
        self.vocab_size = int(self.tok.get_vocab_size(with_added_tokens=True))
        eos = next((vocab[t] for t in _EOS_NAMES if t in vocab), None)
        if eos is None:
            raise DataError(f"HF tokenizer {path} has none of the end tokens {', '.join(_EOS_NAMES)}; "
                            "add one as a special token, or use tokenizer spec 'byte' or 'spm:<V>'")
        self.eos_id = int(eos)
        self.pad_id = int(next((vocab[t] for t in _PAD_NAMES if t in vocab), eos))
        stem = os.path.basename(os.path.dirname(path if is_remote(path) else os.path.abspath(path))) or "tok"
        self.name = f"hf-{_safe(stem)}-{_file_hash(path)}"

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def encode_many(self, texts: list[str]) -> list[np.ndarray]:
        encs = self.tok.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in encs]

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)


def spm_training_text(documents: Iterable[str], char_budget: int = SPM_CHAR_BUDGET) -> list[str]:
    """Deterministic, bounded training input in one pass: documents are cut into chunks of a
    few lines and every k-th chunk is kept, k doubling whenever the kept text passes twice
    `char_budget` (so at most ~2x the budget is held however large the split is)."""
    kept: list[tuple[int, str]] = []
    size, stride, index = 0, 1, 0
    for doc in documents:
        lines = doc.split("\n")
        for i in range(0, len(lines), _SPM_CHUNK_LINES):
            chunk = "\n".join(lines[i:i + _SPM_CHUNK_LINES])[:16000]
            if not chunk.strip():
                continue
            if index % stride == 0:
                kept.append((index, chunk))
                size += len(chunk)
                while size > 2 * char_budget:
                    stride *= 2
                    kept = [(j, c) for j, c in kept if j % stride == 0]
                    size = sum(len(c) for _, c in kept)
            index += 1
    return [c for _, c in kept]


def train_spm(documents: Iterable[str], vocab_size: int, out_path: str) -> None:
    """Train a byte-fallback BPE sentencepiece model on `documents`; write it atomically."""
    import sentencepiece as spm

    sentences = spm_training_text(documents)
    if not sentences:
        raise DataError("cannot train a sentencepiece model on an empty train split; "
                        "use tokenizer spec 'byte' or a dataset with text")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size,
        model_type="bpe", normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, byte_fallback=True, allow_whitespace_only_pieces=True,
        split_digits=True, user_defined_symbols=["\n"], pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        max_sentence_length=16384, input_sentence_size=0, shuffle_input_sentence=False,
        hard_vocab_limit=False, num_threads=2, minloglevel=2)
    write_bytes_atomic(out_path, model.getvalue())


def _first_chars(documents: Iterable[str], limit: int) -> Iterable[str]:
    """The documents until ``limit`` characters have been read (a pass over a whole corpus would take hours)."""
    read = 0
    for doc in documents:
        yield doc
        read += len(doc)
        if read >= limit:
            return


def _trained_spm(vocab: str, dataset: str, data_dir: str) -> SpmTokenizer:
    try:
        vocab_size = int(vocab)
    except ValueError:
        vocab_size = -1
    if vocab_size < 300:
        raise DataError(f"bad tokenizer spec 'spm:{vocab}'; give a vocabulary size of at least 300 "
                        "(256 byte-fallback pieces + specials), e.g. 'spm:4096'")
    source = resolve(dataset, data_dir) if isinstance(dataset, str) else resolve_cfg(dataset, data_dir)
    path = os.path.join(data_dir, "tokenizers", f"{source.key}-spm{vocab_size}.model")
    prepared(f"tokenizer {os.path.basename(path)}", lambda: os.path.exists(path),
             lambda: train_spm(_first_chars(source.iter_documents("train"), SPM_READ_LIMIT), vocab_size, path))
    return SpmTokenizer(path, name=f"spm{vocab_size}-{_file_hash(path)}")


def _existing_file(path: str, what: str) -> str:
    path = path if is_remote(path) else os.path.expanduser(path)
    if not (epath(path).is_file() if is_remote(path) else os.path.isfile(path)):
        raise DataError(f"{what} file not found: {path}; pass an existing file, or use tokenizer "
                        "spec 'byte' or 'spm:<vocab_size>' to build one from the dataset")
    return path


def get_tokenizer(spec: str, dataset, data_dir: str = ""):
    """Build the tokenizer named by `spec` (see module docstring). `dataset` is only used by
    'spm:<V>', which trains on its train split: a data.name such as 'pystdlib' means that
    dataset with default parameters (facts_entities=2000, longctx 4096 x 200, text_key 'text'),
    so one vocabulary serves a whole sweep over facts/longctx sizes; pass the data config
    itself instead to train on exactly its dataset (e.g. a tfds: dataset with another text_key)."""
    data_dir = local_data_dir(data_dir or data_dir_default())
    spec = (spec or "").strip()
    kind, _, arg = spec.partition(":")
    if spec == "byte":
        return ByteTokenizer()
    if kind == "spm" and arg:
        return _trained_spm(arg, dataset, data_dir)
    if kind == "spm_file" and arg:
        path = _existing_file(arg, "sentencepiece model")
        stem = _safe(os.path.splitext(os.path.basename(path))[0])
        return SpmTokenizer(path, name=f"spmfile-{stem}-{_file_hash(path)}")
    if kind == "hf" and arg:
        return HfTokenizer(_existing_file(arg, "HF tokenizer.json"))
    raise DataError(f"unknown tokenizer spec {spec!r}; use one of: {_SPECS}")


def tokenizer_dtype(tok) -> np.dtype:
    """Smallest unsigned dtype that holds every id of `tok` (for the token caches)."""
    return np.dtype(np.uint16) if tok.vocab_size <= 2**16 else np.dtype(np.int32)

