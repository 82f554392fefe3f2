"""``parquet:<glob>`` and ``jsonl:<glob>``: pretraining text in the formats corpora are published in
(FineWeb-Edu, for one, is parquet), local or remote.

Paths go through ``etils.epath``, so ``gs://bucket/fineweb/data/*/*.parquet`` works as well as a local
glob (``~`` expanded; ``**`` recursive locally; remote globs take ``*`` per level, since epath refuses
``**`` there). Files are streamed: parquet a record batch of one column at a
time (``ParquetFile.iter_batches``), JSONL (optionally ``.gz``) a line at a time, so no shard is
ever held in memory whole. The text field is ``data.text_key``; records with empty text are skipped.

Splits: like ``text:``, ~2% of the files (by a hash of their relative path) are validation when
that leaves both splits non-empty; otherwise ~2% of the records of every file (by a hash of the file
and record index) are. ``Source.key`` hashes every file's relative path, size and modification
time, and the text field, so token caches follow the files.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from typing import Iterator

from edge_jax.data.errors import DataError

FORMATS = ("parquet", "jsonl")
PARQUET_BATCH = 1024
VALIDATION_PER_MILLE = 20  # the share of files (or records) that are validation (text: too)


def _epath(path: str):
    from etils import epath
    return epath.Path(os.path.expanduser(path) if "://" not in path else path)


def _glob(pattern: str) -> list:
    """Files matching ``pattern`` (``**`` recursive), sorted."""
    if "://" not in pattern:
        import glob as globlib
        return sorted(_epath(p) for p in globlib.glob(os.path.expanduser(pattern), recursive=True)
                      if os.path.isfile(p))
    if "**" in pattern:
        raise DataError(f"'{pattern}': a remote glob cannot use **; write one * per directory level "
                        "(gs://bucket/data/*/*.parquet)")
    root, parts = pattern.split("://", 1)[0] + "://", pattern.split("://", 1)[1].split("/")
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    base = _epath(root + "/".join(parts[:fixed]))
    if fixed == len(parts):
        return [base] if base.is_file() else []
    return sorted(p for p in base.glob("/".join(parts[fixed:])) if p.is_file())


def _hashed_in(text: str) -> bool:
    return int(hashlib.sha1(text.encode()).hexdigest()[:8], 16) % 1000 < VALIDATION_PER_MILLE


def _text(value, where: str, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{key}' is a {type(value).__name__}, not text; set data.text_key "
                        "to a string field")
    return value


def _parquet_texts(path, rel: str, key: str) -> Iterator[str]:
    import pyarrow.parquet as pq
    with path.open("rb") as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        if key not in names:
            raise DataError(f"{rel} has no field '{key}' (it has {', '.join(names)}); set data.text_key")
        row = 0
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH, columns=[key]):
            for value in batch.column(0).to_pylist():
                yield _text(value, f"{rel} row {row}", key)
                row += 1


def jsonl_records(lines, where: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON-lines text stream; a one-line
    DataError naming ``where`` and the line for one that is not a JSON object."""
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where} line {i} is not JSON ({e.msg}); each line must be one JSON object") from None
        if not isinstance(record, dict):
            raise DataError(f"{where} line {i} is a JSON {type(record).__name__}, not an object; each line "
                            "must be one JSON object")
        yield i, record


def _jsonl_texts(path, rel: str, key: str) -> Iterator[str]:
    with path.open("rb") as raw:
        stream = gzip.GzipFile(fileobj=raw) if str(path).endswith(".gz") else raw
        for i, record in jsonl_records(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), rel):
            if key not in record:
                raise DataError(f"{rel} line {i} has no field '{key}' (it has {', '.join(sorted(record))}); "
                                "set data.text_key")
            yield _text(record[key], f"{rel} line {i}", key)


def file_source(kind: str, pattern: str, text_key: str):
    """``(key, load)`` of the ``kind`` (parquet or jsonl) files matching ``pattern``, for a
    :class:`~edge_jax.data.sources.Source`: ``load(split)`` streams ``{"text": ...}`` records. A
    DataError when nothing matches."""
    paths = _glob(pattern)
    if not paths:
        raise DataError(f"{kind} glob '{pattern}' matches no files; pass an existing path or pattern such as "
                        f"{kind}:/data/fineweb/**/*.{'parquet' if kind == 'parquet' else 'jsonl'}")
    names = [str(p) for p in paths]
    root = os.path.commonpath(names) if "://" not in names[0] else names[0].rsplit("/", 1)[0]
    root = root if len(paths) > 1 else names[0].rsplit("/", 1)[0]
    rels = [n[len(root):].lstrip("/") for n in names]
    stats = [(r, p.stat().length, p.stat().mtime) for r, p in zip(rels, paths)]
    key = f"{kind}-" + hashlib.sha1(repr((stats, text_key)).encode()).hexdigest()[:12]
    read = _parquet_texts if kind == "parquet" else _jsonl_texts
    by_file = any(_hashed_in(r) for r in rels) and not all(_hashed_in(r) for r in rels)

    def load(split: str) -> Iterator[dict]:
        want_val = split == "validation"
        for rel, path in zip(rels, paths):
            if by_file and _hashed_in(rel) != want_val:
                continue
            for i, text in enumerate(read(path, rel, text_key)):
                if text and (by_file or _hashed_in(f"{rel}:{i}") == want_val):
                    yield {"text": text}

    return key, load
