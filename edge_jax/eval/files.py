"""Task documents from local files in the layout their published datasets use.

``<data_dir>/<task>/`` holds one split per file: ``<split>.jsonl`` (or ``.jsonl.gz``), or
``<split>.parquet``, or Hugging Face's shards ``<split>-00000-of-0000N.parquet``; the records keep
the published field names (docs/eval.md has the table). Nothing is downloaded: a missing
directory or split, or a record without a field the task reads, is a one-line :class:`TaskError`
naming the path, the files expected or the missing field (a line that is not a JSON object is the
data layer's one-line :class:`~edge_jax.data.DataError`).
"""
from __future__ import annotations

import glob
import gzip
import os

from edge_jax.data.file_sources import jsonl_records
from edge_jax.eval.tasks import TaskError


def split_files(task_dir: str, split: str) -> list[str]:
    """The files holding ``split`` in ``task_dir`` (one format only), sorted."""
    patterns = (f"{split}.jsonl", f"{split}.jsonl.gz", f"{split}.parquet", f"{split}-*.parquet")
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(glob.escape(task_dir), pattern)))
        if found:
            return found
    return []


def _read(path: str) -> list[dict]:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq
        return pq.read_table(path).to_pylist()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [record for _, record in jsonl_records(f, path)]


def _missing(record: dict, field: str) -> bool:
    """Whether a dotted ``field`` (``choices.text``) is absent from ``record``."""
    node = record
    for part in field.split("."):
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False


def read_split(data_dir: str, task: str, split: str, fields: tuple[str, ...]) -> list[dict]:
    """Every record of ``<data_dir>/<task>/<split>.*``, checked for ``fields``."""
    task_dir = os.path.join(os.path.expanduser(data_dir), task)
    files = split_files(task_dir, split)
    if not files:
        what = "no directory" if not os.path.isdir(task_dir) else f"no '{split}' split"
        raise TaskError(f"{task}: {what} at {task_dir}; put the published '{split}' split there as "
                        f"{split}.jsonl or {split}.parquet (or {split}-00000-of-00001.parquet) with "
                        f"fields {', '.join(fields)} (docs/eval.md)")
    docs = [r for path in files for r in _read(path)]
    for i, record in enumerate(docs):
        lacking = [f for f in fields if _missing(record, f)]
        if lacking:
            raise TaskError(f"{task}: record {i} of {files[0] if len(files) == 1 else task_dir + '/' + split + '*'} "
                            f"has no field {lacking[0]!r} (it has {', '.join(sorted(record)) or 'none'}); "
                            f"the {task} layout needs {', '.join(fields)}")
    if not docs:
        raise TaskError(f"{task}: {', '.join(files)} hold no records; put the published '{split}' split there")
    return docs
