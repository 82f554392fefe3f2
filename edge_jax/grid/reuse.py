"""Reuse across sibling grids: a unit whose full config (seed included) and documents equal those of a
finished record in another grid's output beside OUT (results/<grid>) copies that record instead of
training again (:func:`edge_jax.grid.runner.run_unit`; ``--no-reuse`` turns it off). Records are read with
:func:`edge_jax.grid.records.load_records` (each counted once; unreadable ones passed over)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from edge_jax.grid.records import load_records
from edge_jax.utils import storage

REUSE_IGNORED = ("data.data_dir", "train.ckpt_every", "train.keep_ckpts", "train.log_every")


def sibling_outputs(out: Path) -> list[Path]:
    """Other grid output directories beside ``out`` (results/<grid>)."""
    out = storage.absolute(out)
    parent = out.parent
    if not parent.is_dir():
        return []
    return sorted(d for d in parent.iterdir() if d.is_dir() and d != out and (d / "records").is_dir())


def find_identical_run(dirs: Iterable[Path], config: dict, metric: str, clean_only: bool = False,
                       documents: str = "") -> tuple[Path, dict] | None:
    """``(path, record)`` of a finished, not itself reused, run with the same config and the same
    documents (its ``data_key``; a record without one cannot tell, and is passed over), or None. A record
    written before a config key was renamed or added is read in today's keys, the added ones at their
    defaults;
    ``clean_only`` passes over records made from a dirty working tree."""
    from edge_jax.config import flat_json, flatten, schema_defaults
    defaults = flat_json(schema_defaults(config))  # keys the schema gained after a record was written
    want = comparable(flatten(config), defaults)
    for d in dirs:
        found = load_records(d)
        for path, rec in zip(found.paths, found):
            if rec.get("reused_from") or metric not in (rec.get("metrics") or {}):
                continue
            if clean_only and (rec.get("git") or {}).get("dirty"):
                continue
            if rec.get("data_key") != documents:
                continue
            if recorded_config(rec.get("config", {}), defaults) == want:
                return path, rec
    return None


def comparable(flat: dict, defaults: dict) -> dict:
    """A flat config in the form two runs are compared in: every schema key (``defaults``, flat, where the
    config sets none), less :data:`REUSE_IGNORED`."""
    return {k: v for k, v in {**defaults, **flat}.items() if k not in REUSE_IGNORED}


def recorded_config(config: dict, defaults: dict) -> dict:
    """A record's nested ``config`` in today's keys (:func:`edge_jax.config.upgrade_config`), comparable."""
    from edge_jax.config import flatten, upgrade_config
    return comparable(flatten(upgrade_config(config)), defaults)
