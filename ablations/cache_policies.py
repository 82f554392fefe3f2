"""Two-tier expert cache: stall against VRAM capacity for every policy, on real and synthetic traces.

    edge-jax grid ablations/cache_policies.py --seeds 3

Cells: trace (real, synthetic) x VRAM 10-50% of all experts' bytes (RAM fixed at 60%) x policy (FIFO, LRU,
LFU, EWMA-only, ScoutGate-only, the fused watermark policy, watermark_pop: ours, beside the paper's policy,
Belady's bound). report.md pivots them into capacity x policy tables with the watermark / LRU and
watermark / Belady ratios and the goal check, then tests watermark_pop against the watermark policy
(paired by seed) and Belady; stall.png plots stall against capacity, one line per policy.
"""
from edge_jax.papers.expert_cache.grid import (
    BASE,
    EXTRA_METRICS,
    METRIC,
    NOTES,
    PAPER,
    TRACES,
    cell,
    check_preset,
    stages,
)

VRAMS = (0.1, 0.2, 0.3, 0.4, 0.5)
POLICIES = ("fifo", "lru", "lfu", "ewma", "scoutgate", "watermark", "watermark_pop", "belady")


def get_grid(preset: str) -> dict:
    check_preset(preset)
    cells = {f"{t}-v{round(v * 100)}-{p}": cell(t, v, p) for t in TRACES for v in VRAMS for p in POLICIES}
    return {"name": "cache_policies", "title": "Two-tier MoE expert cache: stall vs VRAM capacity per policy",
            "base": BASE, "base_overrides": {}, "stages": stages(), "cells": cells, "metric": METRIC,
            "lower_is_better": True, "extra_metrics": EXTRA_METRICS, "paper": PAPER, "notes": NOTES,
            "post": "edge_jax.papers.expert_cache.report:write_policy_report",
            "record_notes": "edge_jax.papers.expert_cache.docs:record_notes"}
