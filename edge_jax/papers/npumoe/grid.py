"""What the NPUMoE ablation files (ablations/npumoe_*.py) share: the trained MoE stage, cells, notes.

The MoE LM is trained once per seed (the ``moe`` stage, ``configs/npumoe.py``); every cell only
evaluates it (``train.steps=0``) under one execution: it calibrates on the training split when its
strategy needs loads, compares the strategy with dropless on the validation batches, and times the
MoE layers with the NPUMoE runtime (:mod:`edge_jax.papers.npumoe.runtime`) on real hidden states.

Table 5 (group size x per-expert capacity) has two grids built by :func:`group_capacity_grid`, one per
``moe.overflow`` policy: ``npumoe_group_capacity`` drops the overflow by saliency, as NPUMoE §4.1
describes; ``npumoe_group_capacity_fallback`` runs it exactly on the fallback path (the host CPU in the
runtime), so every cell does the same work and only the static shapes differ.
"""
from __future__ import annotations

from edge_jax.grid.paper import PaperGrid

METRIC = "moe/ms_per_token"
EXTRA_METRICS = ["moe/padding_pct", "moe/drop_pct", "moe/fallback_pct", "moe/calls_per_layer",
                 "moe/val_loss_change_pct", "moe/accuracy_change", "moe/val_loss", "moe/dropless_val_loss",
                 "moe/imbalance"]
EVAL_ONLY = {"train.steps": 0, "init_from": "{stage:moe}"}
# Fig. 17 steps (NPUMoE §5.8): Ours-base, + static tiers, + grouping, + load-aware residency.
ABLATION = {
    "base": {"moe.strategy": "uniform", "moe.capacity": 0, "moe.group": 1},
    "tiers": {"moe.strategy": "npumoe", "moe.group": 1, "moe.residency": False},
    "tiers_grouping": {"moe.strategy": "npumoe", "moe.group": 4, "moe.residency": False},
    "all": {"moe.strategy": "npumoe", "moe.group": 4, "moe.residency": True},
}
# Table 5 (NPUMoE §5.7): every expert at one capacity per 512-token chunk, ``group`` experts per call.
TABLE5_GROUPS = (1, 4, 8, 16)
TABLE5_CAPACITIES = (16, 32, 64, 96, 128)
# ms/token stated in NPUMoE §5.7 (Table 5 itself is an image): 1x32, 4x32, 8x32, 1x64, 4x64, 8x64, 1x128.
TABLE5_PAPER_MS = {"g1_c32": 0.31, "g4_c32": 0.27, "g8_c32": 0.26, "g1_c64": 0.23, "g4_c64": 0.19,
                   "g8_c64": 0.18, "g1_c128": 0.16}


def cell(**moe) -> dict:
    """An evaluation of the seed's trained MoE LM with these ``moe.*`` settings."""
    return {**EVAL_ONLY, **{f"moe.{k}": v for k, v in moe.items()}}


# Every grid's notes end with these at the tiny preset; what the records hold (batches, chunks, the drop
# order, seeds) is written from them by :func:`record_notes`.
TINY_NOTES = ("Tiny preset: a 4-layer MoE LM (d 128, 16 SwiGLU experts of width 128, top-2 in every layer) "
              "trained per seed on the Python standard library corpus (configs/npumoe.py: 600 steps). Each cell "
              "evaluates it on validation batches in prefill chunks (base capacity chunk*k/E; 64 at chunk 512, as "
              "for PhiMoE), after calibrating on training batches when it needs loads. ms/token: the MoE layers "
              "alone, run by the NPUMoE runtime (one jitted call per static group, cold experts on the host CPU) on "
              "real hidden states, median of 10 rounds; cells run one after another, so for speed ratios prefer the "
              "benchmark (edge-jax bench moe, one interleaved run). Loss and accuracy changes are against dropless "
              "execution of the same weights.")
GRID = PaperGrid({"tiny": "configs/npumoe.py:size=tiny", "paper": "configs/npumoe.py:size=paper"},
                 notes={"tiny": TINY_NOTES})
PRESETS = GRID.presets
notes = GRID.notes  # notes(preset, text): the grid's text, then TINY_NOTES at the tiny preset


def grid(preset: str, name: str, title: str, cells: dict, paper: dict, text: str, metric: str = METRIC,
         lower_is_better: bool = True, explanations: dict | None = None) -> dict:
    extra = [m for m in [METRIC] + EXTRA_METRICS if m != metric]
    return {
        "name": name, "title": title, "base": GRID.base(preset),
        "base_overrides": {"train.eval_batches": 4, "moe.time_batches": 1, "moe.calib_batches": 4},
        "stages": {"moe": {"base": GRID.base(preset)}},
        "cells": cells, "metric": metric, "lower_is_better": lower_is_better, "extra_metrics": extra,
        "paper": paper, "notes": notes(preset, text), "explanations": explanations or {},
        "record_notes": "edge_jax.papers.npumoe.grid:record_notes",
    }


def group_capacity_cells(overflow: str = "drop") -> dict:
    """Table 5's cells ``g<group>_c<capacity>``: ``moe.strategy=uniform`` at each capacity and group size;
    ``overflow`` other than the default ``drop`` is set as ``moe.overflow`` (the drop cells keep the
    overrides they always had)."""
    extra = {} if overflow == "drop" else {"overflow": overflow}
    return {f"g{g}_c{c}": cell(strategy="uniform", capacity=c, group=g, **extra)
            for c in TABLE5_CAPACITIES for g in TABLE5_GROUPS}


DROPPED_OVERFLOW = ("the overflow is dropped here, so a larger capacity computes more token copies and takes longer; "
                    "the paper's latency falls with capacity, as when the overflow is processed "
                    "(npumoe_group_capacity_fallback)")


HOST_FALLBACK_ON_CPU = ("the overflow runs on the host here, and on a CPU the host and the static path share the same "
                        "cores, so an overflow row costs about what a static row does and the padding a larger "
                        "capacity adds (the padding column) is extra work; the paper's trend needs a fallback "
                        "costlier per row than its NPU graphs")
GROUPING_ON_CPU = ("on XLA:CPU one batched [G, C, d] call runs no faster than G separate ones once C is large (a "
                   "dispatch costs microseconds: edge-jax bench moe), so more experts per call saves nothing; "
                   "grouping saves per-call overhead, which is small here")


def capacity(cell_name: str) -> int:
    """The per-expert capacity of a Table 5 cell ``g<group>_c<capacity>``."""
    return int(cell_name.rsplit("_c", 1)[1])


def group(cell_name: str) -> int:
    """The group size of a Table 5 cell ``g<group>_c<capacity>``."""
    return int(cell_name.split("_c", 1)[0][1:])


def group_capacity_grid(preset: str, name: str, title: str, overflow: str, text: str) -> dict:
    """Table 5 under one ``moe.overflow`` policy, against the paper's stated latencies. Every pair the
    paper orders by a larger capacity being faster has the reason of its policy (:data:`DROPPED_OVERFLOW`,
    :data:`HOST_FALLBACK_ON_CPU`), and every pair it orders by a larger group at one capacity
    :data:`GROUPING_ON_CPU`; a reason is shown only where the pair comes out significantly the other way."""
    cells = group_capacity_cells(overflow)
    by_capacity = DROPPED_OVERFLOW if overflow == "drop" else HOST_FALLBACK_ON_CPU
    claimed = [(a, b) for a in TABLE5_PAPER_MS for b in TABLE5_PAPER_MS if TABLE5_PAPER_MS[a] < TABLE5_PAPER_MS[b]]
    explanations = {f"{a}>{b}": by_capacity for a, b in claimed if capacity(a) > capacity(b)}
    explanations.update({f"{a}>{b}": GROUPING_ON_CPU for a, b in claimed
                         if capacity(a) == capacity(b) and group(a) > group(b)})
    return grid(preset, name, title, cells,
                {"metric": "ms per token (PhiMoE prefill, M2 Ultra)", "higher_is_better": False,
                 "values": {c: TABLE5_PAPER_MS.get(c) for c in cells}, "source": "NPUMoE §5.7 / Table 5"}, text,
                explanations=explanations)


def _values(records: list[dict], key: str) -> dict:
    """``{value: [cell, ...]}`` of the dotted config ``key`` over ``records`` (cells in order, once each)."""
    out: dict = {}
    for r in records:
        value = r.get("config", {})
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        cells = out.setdefault(value if not isinstance(value, list) else tuple(value), [])
        if r["cell"] not in cells:
            cells.append(r["cell"])
    return out


def _one_or_each(records: list[dict], key: str, unit: str = "") -> str:
    """``512`` when every record has the same value of ``key``, else ``128 (chunk128), 256 (chunk256)``."""
    by_value = _values(records, key)
    if len(by_value) == 1:
        return f"{next(iter(by_value))}{unit}"
    return ", ".join(f"{v}{unit} ({', '.join(cells)})" for v, cells in sorted(by_value.items(), key=_order))


def _order(item) -> tuple:
    """Numbers by value, then anything else by its text."""
    value = item[0]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if number else (1, 0, str(value))


def record_notes(grid, records: list[dict]) -> str:
    """The settings the records ran with (the grid's ``record_notes`` hook): seeds, evaluation and calibration
    batches, prefill chunk, timed batches, which overflow copies are dropped first, the machine."""
    seeds = sorted({int(r["seed"]) for r in records})
    batch, seq = _one_or_each(records, "data.batch_size"), _one_or_each(records, "data.seq_len")
    drops = _values(records, "moe.drop")
    if len(drops) == 1:
        drop = f"moe.drop={next(iter(drops))} in every cell"
    else:
        drop = "; ".join(f"moe.drop={v} in {', '.join(cells)}" for v, cells in sorted(drops.items(), key=_order))
    devices = sorted({f"{(r.get('device') or {}).get('platform', '?')} on host {r.get('host', '?')}" for r in records})
    return (f"{len(records)} records, seeds {', '.join(map(str, seeds))}; every cell evaluated on "
            f"{_one_or_each(records, 'train.eval_batches')} validation batches of {batch} x {seq} tokens in prefill "
            f"chunks of {_one_or_each(records, 'moe.chunk')} tokens, calibrated on "
            f"{_one_or_each(records, 'moe.calib_batches')} training batches, ms/token timed on "
            f"{_one_or_each(records, 'moe.time_batches')} batch(es); overflow copies leave a full expert by {drop} "
            f"(position: latest tokens first; saliency: lowest attention-output norm first); {', '.join(devices)}.")
