"""Reading a grid's records (OUT/records/*.json): the one loader that tables, summary, reuse and the runner
use, so that a record counts once.

A record is keyed by (grid, preset, cell, seed). A second file with the same key (a record copied under
another name) is ignored with one warning naming both files when the two hold the same values, and refused
(:class:`DuplicateRecordError`, one line naming both and which to delete) when they differ. A file that is
not readable JSON, or not a grid record, is named in a warning and listed in ``Records.unreadable``
(``edge-jax summary`` puts it in the grid's row); the runner moves one that stands where a unit's record
belongs to OUT/records.corrupt/ and runs the unit again (:func:`has_record`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from edge_jax.errors import UserError
from edge_jax.utils import storage

CORRUPT_DIR = "records.corrupt"


class DuplicateRecordError(UserError):
    """Two record files of one (grid, preset, cell, seed) hold different values (one-line message)."""


class Records(list):
    """The records of an output directory (a list of dicts, file-name order); ``paths``: the file of each;
    ``unreadable``: the files that could not be read as a record, with why."""

    def __init__(self, records=(), paths=(), unreadable=()):
        super().__init__(records)
        self.paths: list[Path] = list(paths)
        self.unreadable: list[tuple[Path, str]] = list(unreadable)


def read_record(path: Path) -> tuple[dict | None, str]:
    """``(record, "")`` for a readable grid record, else ``(None, why)``."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {' '.join(str(e).split())}"
    if not isinstance(rec, dict) or "cell" not in rec or "seed" not in rec:
        return None, "not a grid record (no cell and seed)"
    return rec, ""


def canonical_name(rec: dict) -> str:
    """The file name the runner gives a record: ``<cell>__seed<seed>.json``."""
    return f"{rec.get('cell')}__seed{rec.get('seed')}.json"


def load_records(out: str | Path, log: Callable[[str], None] | None = None) -> Records:
    """Every readable record under OUT/records, in file-name order, each (grid, preset, cell, seed) once
    (see the module docstring); ``log`` gets a warning per unreadable file and per duplicate."""
    records, paths, unreadable = [], [], []
    first: dict[tuple, int] = {}   # key -> index in records
    for path in sorted((storage.path(out) / "records").glob("*.json")):
        rec, why = read_record(path)
        if rec is None:
            unreadable.append((path, why))
            if log:
                log(f"warning: unreadable record {path} ({why}); it is left out")
            continue
        key = (rec.get("grid"), rec.get("preset"), rec.get("cell"), rec.get("seed"))
        if key not in first:
            first[key] = len(records)
            records.append(rec)
            paths.append(path)
            continue
        i = first[key]
        kept, extra = paths[i], path
        if path.name == canonical_name(rec) and kept.name != path.name:   # keep the file the runner named
            kept, extra = path, kept
        if _values(records[i]) != _values(rec):
            raise DuplicateRecordError(
                f"{kept} and {extra} are both the record of cell {rec.get('cell')!r} seed {rec.get('seed')} "
                f"(grid {rec.get('grid')!r}, preset {rec.get('preset')!r}) with different values; "
                f"{_which_to_delete(kept, extra, rec)}")
        if kept == path:
            records[i], paths[i] = rec, path
        if log:
            log(f"warning: {extra} repeats the record {kept} (cell {rec.get('cell')!r} seed {rec.get('seed')}, "
                f"same values); counted once, delete {extra.name}")
    return Records(records, paths, unreadable)


def _values(rec: dict) -> object:
    """What two records of one key must agree on: their metrics (and curves)."""
    return rec.get("metrics"), rec.get("curve"), rec.get("train_curve")


def _which_to_delete(a: Path, b: Path, rec: dict) -> str:
    """Which of two clashing record files to delete: the one not named as the runner names it."""
    name = canonical_name(rec)
    if a.name == name:
        return f"delete {b} (the runner writes {name}), or delete both and rerun the unit"
    if b.name == name:
        return f"delete {a} (the runner writes {name}), or delete both and rerun the unit"
    return f"keep the one that is right under the name {name} and delete the other, or delete both and rerun"


def has_record(path: Path, log: Callable[[str], None]) -> bool:
    """Whether ``path`` (where a unit's record belongs) holds a readable record; an unreadable one is moved to
    OUT/records.corrupt/ (one warning) so that the unit runs again, and False is returned."""
    if not path.exists():
        return False
    rec, why = read_record(path)
    if rec is not None:
        return True
    aside = path.parent.parent / CORRUPT_DIR / path.name
    n = 1
    while aside.exists():
        aside, n = aside.with_name(f"{path.stem}.{n}{path.suffix}"), n + 1
    storage.move(path, aside)
    log(f"warning: unreadable record {path} ({why}); moved to {aside}, running the unit again")
    return False
