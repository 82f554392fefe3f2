"""What the MeKi ablation files (ablations/meki_*.py) share: base configs, metrics, presets.

Every MeKi grid starts from ``configs/meki.py`` (MeKi at its default switches), so a cell that
is the default MeKi or the dense baseline has the same config in every grid and is trained once
(the runner reuses identical runs across sibling grids).
"""
from __future__ import annotations

PRESETS = ("tiny", "paper")
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
EXTRA_METRICS = ["val_ppl", "exact_match", "answer_nll", "train_loss"]
ZERO_SHOT = "avg zero-shot accuracy over 10 tasks (%)"

TINY_NOTES = (
    "Tiny preset: Qwen3-style decoder, d_model 128, 4 layers, 200 steps of 16 x 128 tokens on "
    "pystdlib with the facts corpus mixed in (configs/meki.py), 4096-piece BPE vocabulary, "
    "MeKi d_mem 64 (ROM 1.05M weights beside 1.38M RAM parameters, close to the paper's "
    "0.54B ROM / 0.60B RAM). Our metric is pystdlib validation loss; exact_match is greedy "
    "recall on 300 held-out facts questions and answer_nll the gold answers' mean NLL after "
    "the question (nats/token, lower is better). The paper's numbers are zero-shot accuracies "
    "averaged over ten benchmarks after 50B tokens, so only orderings are compared."
)


def base(preset: str) -> tuple[str, dict]:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    return ("configs/meki.py:size=tiny", {}) if preset == "tiny" else ("configs/meki.py:size=qwen3_0p6b", {})


def meki_grid(preset: str, *, name: str, title: str, cells: dict, paper: dict, notes: str = "",
              metric: str = "val_loss", extra_metrics=None) -> dict:
    """A grid dict (see edge_jax.grid.spec) over the MeKi base config of ``preset``."""
    base_spec, base_overrides = base(preset)
    return {
        "name": name, "title": title, "base": base_spec, "base_overrides": base_overrides,
        "cells": cells, "metric": metric, "lower_is_better": True,
        "extra_metrics": EXTRA_METRICS if extra_metrics is None else extra_metrics,
        "paper": paper, "notes": " ".join(n for n in (notes, TINY_NOTES if preset == "tiny" else "") if n),
    }
