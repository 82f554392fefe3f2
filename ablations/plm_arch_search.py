"""PLM Table 5 / Tables 15-16: architecture search over layers x width x KV rank.

    edge-jax grid ablations/plm_arch_search.py --preset tiny --seeds 2

Cells trade depth for width at roughly PLM-tiny's non-embedding size (d_ff = 4 d, 32-wide heads,
d_c = d/4 unless the cell varies it). The post hook adds, per cell, the parameter count, MACs and
FLOPs per token (XLA's cost analysis of the forward pass), time per layer and peak memory of a
prefill (measured one cell after another in one process), as Table 5 lists them.
"""
from edge_jax.grid.plm import base, notes

# (layers, d_model, kv rank): the paper's candidates vary the same three.
SHAPES = {"L4_d128_kv32": (4, 128, 32), "L4_d128_kv64": (4, 128, 64), "L6_d96_kv24": (6, 96, 24),
          "L2_d192_kv48": (2, 192, 48)}


def shape(layers: int, width: int, kv_rank: int) -> dict:
    return {"model.n_layers": layers, "model.d_model": width, "model.n_heads": width // 32,
            "model.n_kv_heads": width // 32, "model.d_ff": 4 * width, "model.kv_lora_rank": kv_rank}


def get_grid(preset: str) -> dict:
    if preset != "tiny":
        raise ValueError(f"ablations/plm_arch_search.py has only the tiny preset, got {preset!r}; the paper's "
                         "candidates (Table 15) are 1.2-1.55B models trained on 100B tokens")
    return {
        "name": "plm_arch_search",
        "title": "PLM Table 5: architecture search (layers x width x KV rank)",
        "base": base(preset), "base_overrides": {},
        "cells": {name: shape(*s) for name, s in SHAPES.items()},
        "metric": "val_loss", "lower_is_better": True,
        "extra_metrics": ["val_ppl", "train_loss"],
        "paper": {"metric": "no comparable numbers", "higher_is_better": False,
                  "values": {name: None for name in SHAPES},
                  "source": "PLM Table 5 (losses 2.632-2.665 over seven 1.2-1.55B candidates)"},
        "notes": notes(preset, (
            "The paper's seven candidates differ from these cells, so no paper value sits beside a row: "
            "Table 5's losses span only 2.632-2.665 and PLM chose the 32-layer, d_c 512 candidate for its "
            "time per layer and peak memory, not its loss. Hardware columns are in arch_stats.md.")),
        "post": "edge_jax.analysis.arch_stats:write_arch_stats",
    }
