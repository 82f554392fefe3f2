"""Settings drift: whether a grid's records were made with the settings its cells would run today.

A table is often rebuilt from records (``--tables-only``) long after they were made, and its notes and
the ablation file describe today's settings. :func:`changed_settings` loads, for each record, the config
its cell would run now (the grid's overrides for the cell on today's base config; stage references are
read as the paths the record resolved them to) and compares it key by key with the config the record
kept. The table lists every key that differs, so a reader knows which settings the numbers come from.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from edge_jax.errors import UserError
from edge_jax.grid.reuse import comparable, recorded_config
from edge_jax.grid.spec import Grid
from edge_jax.grid.stages import references

Changes = dict[str, Counter]   # key -> Counter({(value in the record, value today): records})


def changed_settings(grid: Grid, records: list[dict], load_config: Callable[[str, dict], Any],
                     extra: dict | None = None) -> tuple[Changes, int]:
    """Every config key whose value in a record of ``grid`` differs from what its cell would run today
    (with ``extra``, the command's ``--set`` overrides), with how many records hold each (then, now) pair,
    and how many records were compared. Records without a config (older formats) and cells that no longer
    load are passed over: there is nothing to compare them with."""
    from edge_jax.config import flat_json, schema_defaults
    changes: Changes = {}
    compared = 0
    for rec in records:
        if (rec.get("grid") != grid.name or rec.get("preset") != grid.preset or rec.get("cell") not in grid.cells
                or not rec.get("config")):
            continue
        recorded = rec.get("overrides") or {}
        today = {k: recorded.get(k, v) if references({k: v}) else v
                 for k, v in grid.overrides(rec["cell"], rec["seed"], extra).items()}
        try:
            config = load_config(grid.base, today)
        except (UserError, ValueError):
            continue
        compared += 1
        defaults = flat_json(schema_defaults(config))
        then, now = recorded_config(rec["config"], defaults), comparable(flat_json(config), defaults)
        for key in sorted(set(then) | set(now)):
            if then.get(key) == now.get(key):
                continue
            changes.setdefault(key, Counter())[(_show(then.get(key)), _show(now.get(key)))] += 1
    return changes, compared


def changed_line(changes: Changes, n_records: int) -> str:
    """One markdown paragraph naming each changed key, or '' when none changed."""
    if not changes:
        return ""
    parts = []
    for key, pairs in changes.items():
        for (then, now), n in pairs.most_common():
            parts.append(f"`{key}` {then} in {n} of {n_records} record{'s' if n_records != 1 else ''} "
                         f"(today {now})")
    return ("**Records made with other settings than the grid runs today** (the notes describe today's): "
            + "; ".join(parts) + ".")


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."
