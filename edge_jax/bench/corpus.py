"""Generated pretraining corpora for ``edge-jax bench data``: English-like prose in JSONL or parquet files.

Words follow a Zipf law over a vocabulary of the commonest English function words (the top ranks)
and ~60k made-up words built from English-like syllables (some capitalised as names), plus numbers.
Sentences of log-normal length (median 17 words) take commas, end in ``.``, ``?`` or ``!`` and start
with a capital; about a quarter of them close a paragraph (``"\\n\\n"``). Document lengths are
log-normal, median 3 KB, clipped to 200 B .. 100 KB (as in web text such as FineWeb-Edu).

Generation is vectorised: a chunk of ~1000 documents is one numpy draw of word, separator and capital
ids, one join of the matching vocabulary strings and a cut at the first sentence end past each drawn
length (about 65 MB/s of text per core; corpora over 50 MB are drawn by a process per core). Chunks
have random streams of their own, so the text of a seed does not depend on the number of processes,
and the JSONL and parquet corpora of a seed hold the same documents. Files hold about 250 MB of text;
parquet is written one ~1000-row row group at a time. A corpus is written once into a temporary folder,
renamed into place when complete (with a marker file) and then reused.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import re
import shutil
import time
from typing import Iterator

import numpy as np

VERSION = 1                # bump when the generated text changes (old caches are then not reused)
FILE_BYTES = 250_000_000   # text bytes per file
CHUNK_DOCS = 1000          # documents per generated chunk (and per parquet row group)
MARKER = "COMPLETE.json"
FORMATS = ("jsonl", "parquet")
FUNCTION_WORDS = (
    "the of and to a in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so what can more will no other into "
    "its than only also these two first may some time could them about then new after most over such where "
    "how our many between through each those both under while during very because people years used however "
    "well since before being three must even made any same should world part without often").split()
ONSETS = ("", "", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w", "k", "j", "z",
          "br", "cr", "dr", "fr", "gr", "pr", "tr", "bl", "cl", "fl", "pl", "sl", "sh", "ch", "th", "st", "sp",
          "sc", "str", "qu", "wh")
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ea", "ou", "ai", "io", "ee", "oo", "ie", "y")
CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "d", "ng", "nt", "st", "ck", "rd", "ns", "ll", "ss", "x",
         "ct", "rt", "mp")
SUFFIXES = ("", "", "", "", "", "tion", "ing", "ed", "er", "ly", "ment", "ness", "al", "ity", "ous", "ic", "s")
SEPARATORS = (" ", ", ", "; ", ": ", ". ", "? ", "! ", ".\n\n", "?\n\n")
IN_SENTENCE_P = (0.926, 0.068, 0.003, 0.003)       # after a word inside a sentence: space, comma, ;, :
SENTENCE_END_P = (0.70, 0.035, 0.015, 0.24, 0.01)   # after a sentence's last word (the last two end a paragraph)
_SENTENCE_END = re.compile(r"[.?!](?: |\n\n)")
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:?!%\n")
DOC_MEDIAN, DOC_SIGMA, DOC_MIN, DOC_MAX = 3000, 1.0, 200, 100_000


class _Model:
    """The vocabulary as Python strings: entry ``(2 * s + c) * n_words + w`` is word ``w`` (Zipf rank),
    capitalised if ``c``, followed by separator ``s`` (:data:`SEPARATORS`)."""

    def __init__(self, seed: int, made_up: int = 60_000, table_bits: int = 20):
        rng = np.random.default_rng([seed, 1])
        common = list(dict.fromkeys(FUNCTION_WORDS))
        skip = set(common)
        made = [w for w in dict.fromkeys(_made_up_words(rng, made_up) + _numbers(rng)) if w not in skip]
        order = np.argsort(np.array([len(w) for w in made]) + rng.normal(0, 3, len(made)), kind="stable")
        words = common + [made[i] for i in order]                  # shorter words tend to rank higher
        caps = [w[:1].upper() + w[1:] for w in words]
        self.n_words = n = len(words)
        self.entries = np.array([w + sep for sep in SEPARATORS for ws in (words, caps) for w in ws], dtype=object)
        if not SAFE.issuperset("".join(self.entries[:2 * n]) + "".join(SEPARATORS)):
            raise RuntimeError("generated text must stay within corpus.SAFE (JSON lines are written unescaped)")
        p = 1.0 / np.arange(1, n + 1) ** 1.0                       # Zipf over ranks
        p /= p.sum()
        slots = np.maximum(1, np.round(p * 2**table_bits)).astype(np.int64)  # a uniform draw from it is Zipf
        self.table = np.repeat(np.arange(n, dtype=np.int32), slots)
        self.bytes_per_word = float(p @ np.array([len(w) for w in words])) + 1.2   # + separator, roughly


def _made_up_words(rng: np.random.Generator, count: int) -> list[str]:
    """English-looking made-up words: 1-3 syllables, an optional suffix, some capitalised (names)."""
    syllables = np.minimum(rng.geometric(0.55, count), 3)
    pick = [rng.integers(0, len(part), int(syllables.sum())) for part in (ONSETS, VOWELS, CODAS)]
    parts = [ONSETS[o] + VOWELS[v] + CODAS[c] for o, v, c in zip(*pick)]
    suffix = rng.integers(0, len(SUFFIXES), count)
    names = rng.random(count) < 0.08
    out, at = [], 0
    for n, s, name in zip(syllables, suffix, names):
        word = "".join(parts[at:at + n]) + SUFFIXES[s]
        at += n
        out.append(word.capitalize() if name else word)
    return out


def _numbers(rng: np.random.Generator) -> list[str]:
    """Years, small counts, decimals and percentages."""
    return ([str(y) for y in range(1800, 2025)] + [str(n) for n in range(0, 200)]
            + [f"{x:.1f}" for x in rng.uniform(0, 100, 300)] + [f"{n}%" for n in range(1, 100)])


_MODELS: dict[int, _Model] = {}


def _model(seed: int) -> _Model:
    if seed not in _MODELS:
        _MODELS[seed] = _Model(seed)
    return _MODELS[seed]


def _draw(rng: np.random.Generator, p: tuple, count: int) -> np.ndarray:
    """``count`` draws of 0..len(p)-1 with probabilities ``p`` to 1/1000 (a table lookup: rng.choice is slower)."""
    lut = np.repeat(np.arange(len(p), dtype=np.int32), np.round(np.array(p) * 1000).astype(np.int64))
    return lut[rng.integers(0, len(lut), count, dtype=np.int32)]


def chunk(seed: int, index: int, n_docs: int = CHUNK_DOCS) -> list[str]:
    """Chunk ``index`` of a seed's documents: about ``n_docs`` (those that fit the drawn text), each ending at
    a sentence end. Chunks are independent (their own random stream), so processes can draw them in parallel."""
    m, rng = _model(seed), np.random.default_rng([seed, 2, index])
    want = np.clip(rng.lognormal(np.log(DOC_MEDIAN), DOC_SIGMA, n_docs), DOC_MIN, DOC_MAX).astype(np.int64)
    n = int(want.sum() / m.bytes_per_word * 1.03) + 200
    sentence = np.clip(rng.lognormal(np.log(17), 0.5, n // 8 + 50), 3, 80).astype(np.int32)
    ends = np.cumsum(sentence, dtype=np.int32) - 1                   # the last word of each sentence
    ends = ends[ends < n]
    n = int(ends[-1]) + 1
    variant = 2 * _draw(rng, IN_SENTENCE_P, n)                       # the separator after each word ...
    variant[ends] = 2 * (4 + _draw(rng, SENTENCE_END_P, len(ends)))
    variant[0] += 1                                                  # ... and a capital starting each sentence
    variant[ends[:-1] + 1] += 1
    text = "".join(m.entries[variant * m.n_words + m.table[rng.integers(0, len(m.table), n, dtype=np.int32)]].tolist())
    docs, start = [], 0
    for length in want.tolist():                                     # cut at the first sentence end past each length
        end = _SENTENCE_END.search(text, start + length - 1)
        if end is None:
            break
        docs.append(text[start:end.end()].rstrip())
        start = end.end()
    return docs


def chunks(seed: int = 0, processes: int = 1) -> Iterator[list[str]]:
    """The endless, deterministic stream of a seed's chunks, drawn by ``processes`` processes (the same
    chunks whatever their number)."""
    if processes <= 1:
        yield from (chunk(seed, k) for k in itertools.count())
        return
    import concurrent.futures
    import multiprocessing
    # spawn, not fork: the parent may hold JAX's threads, and a forked child can deadlock on their locks
    pool = concurrent.futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        ahead = collections.deque(pool.submit(chunk, seed, k) for k in range(2 * processes))
        for k in itertools.count(2 * processes):
            docs = ahead.popleft().result()
            ahead.append(pool.submit(chunk, seed, k))
            yield docs
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def documents(seed: int = 0) -> Iterator[str]:
    """The endless, deterministic stream of a seed's documents."""
    for docs in chunks(seed):
        yield from docs


def sample(seed: int = 0, nbytes: int = 5_000_000) -> list[str]:
    """The first documents of a seed's stream, about ``nbytes`` of text (e.g. to train a tokenizer on)."""
    out, size = [], 0
    for doc in documents(seed):
        if size >= nbytes:
            return out
        out.append(doc)
        size += len(doc)
    return out


def file_groups(size: int, seed: int = 0, file_bytes: int = FILE_BYTES,
                processes: int = 1) -> Iterator[tuple[int, list[str]]]:
    """(file number, documents) groups of a corpus of ``size`` text bytes: at most one chunk a group, a file
    closing once it holds ``file_bytes``; the last document is cut to hit ``size``."""
    written, in_file, file_no = 0, 0, 0
    for docs in chunks(seed, processes):
        group, done = [], False
        for doc in docs:
            if written + len(doc) >= size:
                doc, done = doc[:size - written].rstrip(), True
            if doc:
                group.append(doc)
                written, in_file = written + len(doc), in_file + len(doc)
            if done or in_file >= file_bytes:
                break
        if group:
            yield file_no, group
        if done:
            return
        if in_file >= file_bytes:
            file_no, in_file = file_no + 1, 0


class _Writer:
    """One open output file of a format. JSON lines are formatted directly: the generated text holds no
    character JSON escapes other than newline (:data:`SAFE` is checked when the vocabulary is built)."""

    def __init__(self, path: str, fmt: str):
        self.fmt = fmt
        if fmt == "jsonl":
            self.file = open(path, "w", encoding="ascii")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            self.pa, self.schema = pa, pa.schema([("text", pa.string()), ("id", pa.int64())])
            self.file = pq.ParquetWriter(path, self.schema, use_dictionary=False)

    def write(self, docs: list[str], first_id: int) -> None:
        if self.fmt == "jsonl":
            self.file.write("".join(['{"text": "%s", "id": %d}\n' % (t.replace("\n", "\\n"), first_id + i)
                                     for i, t in enumerate(docs)]))
            return
        pa = self.pa
        offsets = np.zeros(len(docs) + 1, np.int32)
        np.cumsum([len(t) for t in docs], out=offsets[1:])
        data = pa.py_buffer("".join(docs).encode("ascii"))
        text = pa.StringArray.from_buffers(len(docs), pa.py_buffer(offsets), data)
        ids = pa.array(np.arange(first_id, first_id + len(docs), dtype=np.int64))
        self.file.write_table(pa.table([text, ids], schema=self.schema), row_group_size=len(docs))

    def close(self) -> None:
        self.file.close()


def write_corpus(folder: str, fmt: str, size: int, seed: int = 0, file_bytes: int = FILE_BYTES,
                 processes: int = 0) -> dict:
    """Write the corpus into ``folder`` (``part-00000.<fmt>``, ...); returns its counts and timing. Chunks are
    drawn by ``processes`` processes (0: one per CPU core for corpora over 50 MB, else this process)."""
    if processes <= 0:
        processes = min(8, os.cpu_count() or 1) if size > 50_000_000 else 1
    t0, writer, current, docs, text = time.perf_counter(), None, -1, 0, 0
    for file_no, group in file_groups(size, seed, file_bytes, processes):
        if file_no != current:
            if writer:
                writer.close()
            writer, current = _Writer(os.path.join(folder, f"part-{file_no:05d}.{fmt}"), fmt), file_no
        writer.write(group, docs)
        docs, text = docs + len(group), text + sum(map(len, group))
    writer.close()
    seconds = time.perf_counter() - t0
    return {"format": fmt, "size": size, "seed": seed, "files": current + 1, "documents": docs,
            "text_bytes": text, "seconds": round(seconds, 2), "mb_per_s": round(text / 1e6 / seconds, 1),
            "processes": processes}


def corpus_path(root: str, fmt: str, size: int, seed: int = 0) -> str:
    """Where the corpus of ``size`` text bytes in ``fmt`` (jsonl | parquet) lives, whether made yet or not."""
    if fmt not in FORMATS:
        raise ValueError(f"corpus format {fmt!r}: use one of {', '.join(FORMATS)}")
    return os.path.join(os.path.expanduser(root), f"v{VERSION}-{fmt}-{size}-seed{seed}")


def is_complete(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, MARKER))


def corpus_dir(root: str, fmt: str, size: int, seed: int = 0) -> str:
    """The folder of the corpus of ``size`` text bytes in ``fmt`` (jsonl | parquet), generated on first use."""
    folder = corpus_path(root, fmt, size, seed)
    if is_complete(folder):
        return folder
    tmp = f"{folder}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        info = write_corpus(tmp, fmt, size, seed)
        with open(os.path.join(tmp, MARKER), "w") as f:
            json.dump(info, f)
        if os.path.exists(folder) and not os.path.exists(os.path.join(folder, MARKER)):
            shutil.rmtree(folder)                      # an incomplete folder left by hand
        os.rename(tmp, folder)
    except OSError:
        if not os.path.exists(os.path.join(folder, MARKER)):   # not another process that finished first
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def corpus_info(folder: str) -> dict:
    """The counts and generation timing recorded in a corpus folder's marker file."""
    with open(os.path.join(folder, MARKER)) as f:
        return json.load(f)


def parse_size(text: str) -> int:
    """``100M`` / ``1G`` / ``3G`` / ``500K`` / ``2000000`` as bytes (decimal units)."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def size_label(size: int) -> str:
    """``100M`` / ``1G`` / ``2.5M``: a size in decimal units."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if size >= scale:
            return f"{size / scale:g}{unit}"
    return str(size)
