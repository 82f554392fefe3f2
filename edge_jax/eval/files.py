"""Task documents from local files in the layout their published datasets use.

``<data_dir>/<task>/`` holds one split per file: ``<split>.jsonl`` (or ``.jsonl.gz``), or
``<split>.parquet``, or Hugging Face's shards ``<split>-00000-of-0000N.parquet``; the records keep
the published field names (docs/eval.md has the table). Nothing is downloaded: a missing
directory or split is a one-line :class:`TaskError` naming the path and the files expected; a
record that lacks a field the task reads, or holds a value its format cannot score (a label out of
range, null or empty text, ...), is a one-line :class:`~edge_jax.eval.validate.RecordError` naming
the file, the line (parquet: the row) and the field (a line that is not a JSON object or not UTF-8
text, a gzip file under a plain name and a truncated ``.gz`` are the data layer's one-line
:class:`~edge_jax.data.DataError`, naming the file and the line).
"""
from __future__ import annotations

import glob
import gzip
import os

from edge_jax.data.file_sources import NotUTF8, arrow_pylist, gzip_named_plain, jsonl_records, lines_of
from edge_jax.eval.tasks import TaskError
from edge_jax.eval.validate import check_documents


def split_files(task_dir: str, split: str) -> list[str]:
    """The files holding ``split`` in ``task_dir`` (one format only), sorted."""
    patterns = (f"{split}.jsonl", f"{split}.jsonl.gz", f"{split}.parquet", f"{split}-*.parquet")
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(glob.escape(task_dir), pattern)))
        if found:
            return found
    return []


def _read(path: str) -> list[tuple[str, dict]]:
    """``(where, record)`` for every record of ``path``: where is ``<path> line N`` (JSON lines, the
    file's own line numbers) or ``<path> row N`` (parquet, from 1)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        rows = arrow_pylist(pq.read_table(path), lambda i: f"{path} row {i + 1}")
        return [(f"{path} row {i}", r) for i, r in enumerate(rows, 1)]
    with open(path, "rb") as raw:
        f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        try:
            return [(f"{path} line {i}", record) for i, record in jsonl_records(lines_of(f, raw, path), path)]
        except NotUTF8 as e:
            raise gzip_named_plain(path, path) or e from None


def read_split(data_dir: str, task: str, split: str, fields: tuple[str, ...]) -> list[dict]:
    """Every record of ``<data_dir>/<task>/<split>.*``, each checked to hold what ``task``'s format
    reads (:mod:`edge_jax.eval.validate`; a task without a schema there: that ``fields`` are present)."""
    task_dir = os.path.join(os.path.expanduser(data_dir), task)
    files = split_files(task_dir, split)
    if not files:
        what = "no directory" if not os.path.isdir(task_dir) else f"no '{split}' split"
        raise TaskError(f"{task}: {what} at {task_dir}; put the published '{split}' split there as "
                        f"{split}.jsonl or {split}.parquet (or {split}-00000-of-00001.parquet) with "
                        f"fields {', '.join(fields)} (docs/eval.md)")
    located = [r for path in files for r in _read(path)]
    if not located:
        raise TaskError(f"{task}: {', '.join(files)} hold no records; put the published '{split}' split there")
    docs = [record for _, record in located]
    check_documents(task, docs, lambda i: located[i][0], required=fields)
    return docs
