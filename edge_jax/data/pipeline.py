"""Token caches and the grain pipelines that turn them into batches.

A split is tokenised once: every document, each followed by eos, as one flat array saved to
<data_dir>/tokens/<source key>-<split>-<tokenizer name>.npy (written to a temporary file, then
os.replace), and memory-mapped afterwards. A combined dataset (a+b) concatenates the caches
of its parts for train.

Training windows hold seq_len + 1 tokens with stride seq_len, so every token after the first
is a target exactly once per epoch: inputs = window[:-1], targets = window[1:]. One global order
(grain's shuffle of all windows, a new order every epoch, repeated forever) is cut into global
batches of data.batch_size rows; a process reads only its block of rows of each (the rows its
devices hold), so the global batches are the same rows in the same order whatever the number of
processes. In a job of several processes, process 0 builds a missing cache and the others wait
for it (edge_jax.distributed.prepared).
"""
from __future__ import annotations

import io
import itertools
import os

import numpy as np

from edge_jax.data.errors import DataError
from edge_jax.data.sources import Source, data_dir_default, resolve_cfg
from edge_jax.data.tokenizers import tokenizer_dtype
from edge_jax.distributed import prepared
from edge_jax.utils.atomic import write_bytes_atomic

_READ_THREADS = 2
_PREFETCH_BATCHES = 4
_ENCODE_BLOCK = 1024  # documents tokenised at a time (bounded memory on big splits)


def _data_dir(data_cfg) -> str:
    return getattr(data_cfg, "data_dir", "") or data_dir_default()


def tokens_path(data_dir: str, source: Source, split: str, tok) -> str:
    return os.path.join(data_dir, "tokens", f"{source.key}-{split}-{tok.name}.npy")


def split_tokens(source: Source, split: str, tok, data_dir: str) -> np.ndarray:
    """The flat token array of a split (memory-mapped from its cache; built on first use)."""
    if source.parts and split == "train":
        return np.concatenate([split_tokens(p, "train", tok, data_dir) for p in source.parts])
    path = tokens_path(data_dir, source, split, tok)

    def build() -> None:
        dtype, eos = tokenizer_dtype(tok), np.array([tok.eos_id], dtype=tokenizer_dtype(tok))
        blocks, docs = [], iter(source.iter_documents(split))
        while block := list(itertools.islice(docs, _ENCODE_BLOCK)):
            blocks.append(np.concatenate([piece for ids in tok.encode_many(block)
                                          for piece in (np.asarray(ids, dtype), eos)]))
        if not blocks:
            raise DataError(f"dataset '{source.name}' split '{split}' has no documents; "
                            "use another split or dataset")
        flat = np.concatenate(blocks)
        buf = io.BytesIO()
        np.save(buf, flat, allow_pickle=False)
        write_bytes_atomic(path, buf.getvalue())

    prepared(f"tokens {os.path.basename(path)}", lambda: os.path.exists(path), build)
    return np.load(path, mmap_mode="r")


class Windows:
    """Random-access view of the training windows of a split: item i is int32[seq_len+1]."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.total = (len(tokens) - 1) // seq_len

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.total:
            raise IndexError(i)
        start = i * self.seq_len
        return np.asarray(self.tokens[start:start + self.seq_len + 1], dtype=np.int32)


def _to_io(batch_BW: np.ndarray) -> dict:
    return {"inputs": batch_BW[:, :-1], "targets": batch_BW[:, 1:]}


def _check_sizes(data_cfg, blocks: int) -> tuple[int, int]:
    seq_len, batch = int(data_cfg.seq_len), int(data_cfg.batch_size)
    if seq_len < 1 or batch < 1:
        raise DataError(f"data.seq_len ({seq_len}) and data.batch_size ({batch}) must be positive; "
                        "set them to positive integers")
    if batch % blocks:
        raise DataError(f"data.batch_size {batch} is not divisible by the {blocks} processes; "
                        f"use a multiple of {blocks}")
    return seq_len, batch


def make_train_iter(data_cfg, tok, seed: int, block: int = 0, blocks: int = 1):
    """Endless grain iterator of {'inputs', 'targets'}: int32[batch_size // blocks, seq_len], rows
    ``block * batch_size // blocks`` onward of each global batch (:func:`edge_jax.sharding.process_block`
    gives a process its block). It has get_state() -> JSON-able dict (the number of global batches
    read, the same in every process) and set_state(state); restoring a state replays exactly the
    batches that followed it. Deterministic given (data, tokenizer, seed, block, blocks)."""
    import grain

    seq_len, batch = _check_sizes(data_cfg, blocks)
    if not 0 <= block < blocks:
        raise DataError(f"row block {block} is outside 0..{blocks - 1}; pass "
                        "edge_jax.sharding.process_block(batch sharding, data.batch_size)")
    local = batch // blocks
    source = resolve_cfg(data_cfg)
    tokens = split_tokens(source, "train", tok, _data_dir(data_cfg))
    windows = Windows(tokens, seq_len)
    if windows.total < batch:
        raise DataError(
            f"dataset '{source.name}' train split has {len(tokens)} tokens, {windows.total} windows "
            f"of data.seq_len {seq_len} (+1), fewer than one batch of {batch}; lower data.seq_len to "
            f"at most {max(1, (len(tokens) - 1) // batch)} or data.batch_size, or use more data")
    ds = (grain.MapDataset.source(windows)
          .shuffle(seed=int(seed) % 2**32)
          .repeat()
          .batch(local, drop_remainder=True)[block::blocks]   # global batch k = local batches k*blocks ...
          .map(_to_io))
    options = grain.ReadOptions(num_threads=_READ_THREADS, prefetch_buffer_size=_PREFETCH_BATCHES)
    return iter(ds.to_iter_dataset(options))


def eval_windows(tokens: np.ndarray, seq_len: int, pad_id: int):
    """All windows of a split, the last one padded: (windows int32[N, T+1], mask float32[N, T]).
    The mask sums to len(tokens) - 1: every token after the first is a target exactly once."""
    n_targets = len(tokens) - 1
    full, rest = divmod(n_targets, seq_len)
    count = full + (rest > 0)
    windows = np.full((count, seq_len + 1), pad_id, dtype=np.int32)
    mask = np.zeros((count, seq_len), dtype=np.float32)
    if full:
        index = np.arange(full)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
        windows[:full] = np.asarray(tokens)[index]
        mask[:full] = 1.0
    if rest:
        windows[full, :rest + 1] = tokens[full * seq_len:]
        mask[full, :rest] = 1.0
    return windows, mask


def make_eval_batches(data_cfg, tok, split: str = "validation", num_batches: int = 0) -> list[dict]:
    """Batches {'inputs', 'targets', 'mask'} of global size data.batch_size covering `split` in
    order (num_batches = 0: all of it, else the first num_batches). mask is 1.0 on real targets
    and 0.0 on the padding of the last window and of the rows that fill the last batch."""
    seq_len, batch = _check_sizes(data_cfg, 1)
    source = resolve_cfg(data_cfg)
    tokens = split_tokens(source, split, tok, _data_dir(data_cfg))
    if len(tokens) < 2:
        raise DataError(f"dataset '{source.name}' split '{split}' has {len(tokens)} token; "
                        "evaluate on a larger split")
    windows, mask = eval_windows(tokens, seq_len, tok.pad_id)
    n = -(-len(windows) // batch)
    if num_batches:
        n = min(n, int(num_batches))
    out = []
    for b in range(n):
        w, m = windows[b * batch:(b + 1) * batch], mask[b * batch:(b + 1) * batch]
        if len(w) < batch:
            w = np.concatenate([w, np.full((batch - len(w), seq_len + 1), tok.pad_id, np.int32)])
            m = np.concatenate([m, np.zeros((batch - len(m), seq_len), np.float32)])
        out.append({"inputs": w[:, :-1], "targets": w[:, 1:], "mask": m})
    return out
