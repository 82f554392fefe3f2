"""Two-tier expert cache: sensitivity of the fused watermark policy to η, γ, the watermark step and the
hysteresis, one at a time around the defaults, on the real trace at 20% VRAM; ``no_prefetch`` gives the
layer no compute time to prefetch in (profile.compute_ms=0), so the policy fetches on demand only, like
Belady's bound.

    edge-jax grid ablations/cache_sensitivity.py --seeds 3
"""
from edge_jax.papers.expert_cache.grid import (
    BASE,
    EXTRA_METRICS,
    METRIC,
    NOTES,
    PAPER,
    cell,
    check_preset,
    stages,
)

SWEEPS = {"eta": (0.0, 0.25, 0.75, 1.0), "gamma": (0.0, 0.25, 1.0, 2.0), "watermark_step": (0.005, 0.5, 5.0),
          "hysteresis": (0.0, 0.3)}
PREFIX = {"eta": "eta", "gamma": "gamma", "watermark_step": "step", "hysteresis": "hyst"}


def get_grid(preset: str) -> dict:
    check_preset(preset)
    cells = {"default": cell("real", 0.2, "watermark")}
    for key, values in SWEEPS.items():
        for v in values:
            cells[f"{PREFIX[key]}_{v:g}"] = cell("real", 0.2, "watermark", **{key: v})
    cells["no_prefetch"] = {**cell("real", 0.2, "watermark"), "profile.compute_ms": 0.0}
    return {"name": "cache_sensitivity", "title": "Watermark policy sensitivity to eta, gamma, step and hysteresis "
            "(real trace, 20% VRAM)", "base": BASE, "base_overrides": {}, "stages": stages(), "cells": cells,
            "metric": METRIC, "lower_is_better": True, "extra_metrics": EXTRA_METRICS, "paper": PAPER,
            "notes": NOTES, "post": "edge_jax.papers.expert_cache.report:write_sensitivity_report",
            "record_notes": "edge_jax.papers.expert_cache.docs:record_notes"}
