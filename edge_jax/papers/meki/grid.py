"""What the MeKi ablation files (ablations/meki_*.py) share: base configs, metrics, presets.

Every MeKi grid starts from ``configs/meki.py`` (MeKi at its default switches), so a cell that
is the default MeKi or the dense baseline has the same config in every grid and is trained once
(the runner reuses identical runs across sibling grids).
"""
from __future__ import annotations

from edge_jax.grid.paper import PaperGrid

BASELINE = {"model.memory": "none"}
MEKI = {}  # the base config is MeKi with the paper's choices
# tiny_plus from models/presets.py as overrides, so it can be a cell next to tiny (d_mem = d_model / 2).
TINY_PLUS = {"model.d_model": 192, "model.n_heads": 6, "model.d_ff": 576, "model.d_mem": 96}
# MeKi-1.7B (Table 5) as overrides of the 0.6B paper base.
PAPER_1P7B = {"model.d_model": 2048, "model.d_ff": 6144, "model.d_mem": 256}
# MeKi-4B (Table 5): Qwen3-4B's shape as overrides of the same base.
PAPER_4B = {"model.d_model": 2560, "model.n_layers": 36, "model.n_heads": 32, "model.d_ff": 9728,
            "model.d_mem": 512}
# tokens_per_s is left out: grid cells share the CPU, so their speeds say nothing (see bench meki-decode).
EXTRA_METRICS = ["zero_shot/facts_mc", "val_ppl", "exact_match", "answer_nll", "train_loss"]
ZERO_SHOT = "avg zero-shot accuracy over 10 tasks (%)"
# Scored after every cell (edge_jax.eval): the built-in stand-ins at tiny, the paper's ten benchmarks at
# the paper preset (their files: --set eval.data_dir=DIR, docs/eval.md). Grids whose paper column is
# zero-shot accuracy rank cells by zero_shot_avg, the same kind of number, with val_loss beside; the
# tiny facts setting (configs/meki.py) keeps facts_mc off chance and off the ceiling for the baseline.
ZERO_SHOT_TASKS = {"tiny": "builtin", "paper": "meki10"}

TINY_NOTES = (
    "Tiny preset: Qwen3-style decoder, d_model 128, 4 layers, pystdlib with the facts corpus mixed in "
    "(configs/meki.py), MeKi d_mem 64 (ROM 1.05M weights beside 1.38M RAM parameters, close to the paper's "
    "0.54B ROM / 0.60B RAM; edge-jax params). zero_shot_avg is the mean zero-shot accuracy over the built-in "
    "tasks facts_mc (the 30 QA-trained people's facts in held-out question wordings), code_cloze and "
    "longctx_mc, all 4-way, chance 0.25 (docs/eval.md; the documents each scored are below, from the "
    "records): the stand-in for the paper's ten benchmarks, and the ranking metric where the paper's is "
    "zero-shot accuracy; zero_shot/facts_mc is the knowledge task alone. The facts corpus is mixed in so the "
    "dense baseline recalls some facts but not all. exact_match is greedy recall on held-out facts questions "
    "about the other 30 people (knowledge extraction, at the floor at this scale) and answer_nll the gold "
    "answers' mean NLL after the question (nats/token, lower is better). The paper's numbers are zero-shot "
    "accuracies averaged over ten benchmarks after 50B tokens, so only orderings are compared."
)

GRID = PaperGrid({"tiny": "configs/meki.py:size=tiny", "paper": "configs/meki.py:size=qwen3_0p6b"},
                 notes={"tiny": TINY_NOTES})
PRESETS = GRID.presets


def meki_grid(preset: str, *, name: str, title: str, cells: dict, paper: dict, notes: str = "",
              explanations: dict | None = None) -> dict:
    """A grid dict (see edge_jax.grid.spec) over the MeKi base config of ``preset``: ranked by
    zero_shot_avg where the paper reports zero-shot accuracy, by val_loss otherwise; ``explanations``:
    the reasons for significant disagreements (``{"better>worse": "one line"}``)."""
    zero_shot = paper["metric"] == ZERO_SHOT
    return {
        "name": name, "title": title, "base": GRID.base(preset), "base_overrides": {},
        "cells": cells, "metric": "zero_shot_avg" if zero_shot else "val_loss", "lower_is_better": not zero_shot,
        "extra_metrics": ["val_loss", *EXTRA_METRICS] if zero_shot else ["zero_shot_avg", *EXTRA_METRICS],
        "zero_shot": ZERO_SHOT_TASKS[preset],
        "paper": paper, "notes": GRID.notes(preset, notes),
        "explanations": explanations or {},
        "record_notes": "edge_jax.papers.meki.notes:record_notes",
    }
