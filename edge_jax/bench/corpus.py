"""Generated pretraining corpora for ``edge-jax bench data``: English-like prose in JSONL or parquet files.

Documents are paragraphs of sentences drawn from a pool of a million sentences, each made of words of
a Zipf-distributed vocabulary (made-up words of realistic lengths beside the common English function
words, some numbers, a capital after every full stop). Document lengths are log-normal, median about
3 KB with a tail to about 100 KB, as in web-text corpora such as FineWeb-Edu. Files hold about 250 MB
of text each; a corpus is written once per (format, size, seed) into a temporary folder, renamed when
complete, and reused afterwards.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

FILE_BYTES = 250_000_000
POOL = 1_000_000           # sentences to draw documents from
FUNCTION_WORDS = ("the of and to a in is that for it as was with be by on not he this are or his from at "
                  "which but have an they you were her she there been one all we their has would when if so "
                  "what can more will no other into its than only also these two first may some").split()
_LETTERS = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
_LETTER_P = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0,
                      2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07])


def _vocabulary(rng: np.random.Generator, size: int = 40_000) -> list[str]:
    lengths = np.clip(rng.poisson(5.5, size) + 2, 2, 16)
    letters = rng.choice(_LETTERS, size=int(lengths.sum()), p=_LETTER_P / _LETTER_P.sum()).tobytes().decode()
    ends = np.cumsum(lengths)
    made = [letters[e - n:e] for e, n in zip(ends, lengths)]
    numbers = [str(n) for n in rng.integers(0, 3000, size // 50)]
    return FUNCTION_WORDS + made[:size // 4] + numbers + made[size // 4:]


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    vocab = _vocabulary(rng)
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    lengths = np.clip(rng.lognormal(2.7, 0.45, count).astype(int), 3, 60)
    words = rng.choice(len(vocab), size=int(lengths.sum()), p=p / p.sum())
    ends = np.cumsum(lengths)
    marks = rng.choice([". ", ". ", ". ", "? ", "! ", ".\n\n"], size=count, p=[0.3, 0.3, 0.24, 0.03, 0.03, 0.1])
    out = []
    for e, n, mark in zip(ends, lengths, marks):
        text = " ".join(vocab[w] for w in words[e - n:e])
        out.append(text[:1].upper() + text[1:] + mark)
    return out


def documents(seed: int = 0):
    """An endless stream of documents (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    pool = np.array(_sentences(rng, POOL), dtype=object)
    while True:
        sizes = np.clip(rng.lognormal(np.log(3000), 1.0, 1024), 200, 100_000)
        per_doc = np.maximum(1, (sizes / 90).astype(int))
        picks = rng.integers(0, POOL, int(per_doc.sum()))
        ends = np.cumsum(per_doc)
        for e, n in zip(ends, per_doc):
            yield "".join(pool[picks[e - n:e]]).rstrip()


def parse_size(text: str) -> int:
    """``100M`` / ``1G`` / ``3G`` / ``2000000`` as bytes (decimal units)."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def _write(folder: str, fmt: str, size: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs, written, index, file_no = documents(seed), 0, 0, 0
    while written < size:
        target = min(FILE_BYTES, size - written)
        path = os.path.join(folder, f"part-{file_no:05d}.{fmt}")
        in_file = 0
        writer = None if fmt == "jsonl" else pq.ParquetWriter(path, pa.schema([("text", pa.string()),
                                                                                ("id", pa.int64())]))
        out = open(path, "w", encoding="utf-8") if fmt == "jsonl" else None
        while in_file < target:
            texts = []
            while in_file < target and len(texts) < 1000:
                texts.append(next(docs))
                in_file += len(texts[-1])
            ids = list(range(index, index + len(texts)))
            index += len(texts)
            if out:
                out.writelines(json.dumps({"text": t, "id": i}) + "\n" for t, i in zip(texts, ids))
            else:
                writer.write_table(pa.table({"text": texts, "id": ids}))
        (out or writer).close()
        written += in_file
        file_no += 1


def corpus_dir(root: str, fmt: str, size: int, seed: int = 0) -> str:
    """The folder of a generated corpus of ``size`` bytes of text in ``fmt`` (jsonl | parquet), made on first use."""
    if fmt not in ("jsonl", "parquet"):
        raise ValueError(f"format {fmt!r}: use jsonl or parquet")
    folder = os.path.join(root, f"{fmt}-{size}-seed{seed}")
    if os.path.exists(os.path.join(folder, "COMPLETE")):
        return folder
    tmp = f"{folder}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    _write(tmp, fmt, size, seed)
    open(os.path.join(tmp, "COMPLETE"), "w").close()
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return folder
