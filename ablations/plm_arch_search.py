"""PLM Table 5 / Tables 15-16: architecture search over layers x width x KV rank.

    edge-jax grid ablations/plm_arch_search.py --preset tiny --seeds 3

Tiny cells trade depth for width near PLM-tiny's non-embedding size (d_ff = 4 d, 32-wide heads,
d_c = d/4 unless the cell varies it; not parameter-matched). The paper preset is Table 15's seven
candidates with Table 17's sandbox schedule (100B tokens, batch 960 x 4096, lr 5e-4 -> 5e-6). The post
hook adds, per cell, the parameter count, MACs and FLOPs per token (XLA's cost analysis of the forward
pass), time per layer and peak memory of a prefill (measured one cell after another in one process), as
Table 5 lists them.
"""
from edge_jax.papers.plm.grid import RECORD_NOTES, base, notes, zero_shot

# (layers, d_model, kv rank): the paper's candidates vary the same three.
SHAPES = {"L4_d128_kv32": (4, 128, 32), "L4_d128_kv64": (4, 128, 64), "L6_d96_kv24": (6, 96, 24),
          "L2_d192_kv48": (2, 192, 48)}


def shape(layers: int, width: int, kv_rank: int) -> dict:
    return {"model.n_layers": layers, "model.d_model": width, "model.n_heads": width // 32,
            "model.n_kv_heads": width // 32, "model.d_ff": 4 * width, "model.kv_lora_rank": kv_rank}


# Table 15: layers, d_model, heads, d_head, d_ffn, kv rank, q rank, d_rope; Table 5: loss.
PAPER_CANDIDATES = {
    "no1_L28_d2816": ((28, 2816, 44, 64, 7040, 256, 768, 32), 2.639),
    "no2_L32_d2304": ((32, 2304, 36, 64, 5760, 256, 768, 32), 2.653),
    "no3_L32_d2560": ((32, 2560, 40, 64, 6400, 256, 768, 32), 2.659),
    "no4_L36_d2304": ((36, 2304, 36, 64, 5760, 256, 768, 32), 2.653),
    "no5_L40_d2304": ((40, 2304, 36, 64, 5760, 256, 768, 32), 2.665),
    "no6_L36_d2048": ((36, 2048, 32, 64, 8192, 256, 768, 32), 2.632),
    "no7_L32_d2048": ((32, 2048, 16, 128, 8192, 512, 1536, 64), 2.634),
}
SANDBOX_STEPS = 100_000_000_000 // (960 * 4096)  # Table 17: 100B tokens in batches of 960 x 4096


def paper_candidate(layers, width, heads, d_head, d_ff, kv_rank, q_rank, d_rope) -> dict:
    return {"model.n_layers": layers, "model.d_model": width, "model.n_heads": heads, "model.n_kv_heads": heads,
            "model.head_dim": d_head, "model.d_ff": d_ff, "model.kv_lora_rank": kv_rank,
            "model.q_lora_rank": q_rank, "model.d_rope": d_rope}


def get_grid(preset: str) -> dict:
    if preset == "paper":
        return zero_shot(preset, {
            "name": "plm_arch_search", "title": "PLM Table 5: architecture search (Table 15 candidates)",
            "base": base(preset),
            "base_overrides": {"data.batch_size": 960, "train.steps": SANDBOX_STEPS, "train.lr": 5e-4,
                               "train.min_lr": 5e-6, "train.warmup_steps": SANDBOX_STEPS // 100},
            "cells": {name: paper_candidate(*c) for name, (c, _) in PAPER_CANDIDATES.items()},
            "metric": "val_loss", "lower_is_better": True, "extra_metrics": ["val_ppl", "train_loss"],
            "paper": {"metric": "loss after 100B tokens", "higher_is_better": False,
                      "values": {name: loss for name, (_, loss) in PAPER_CANDIDATES.items()},
                      "source": "PLM Table 5 (losses), Table 15 (shapes), Table 17 (schedule)"},
            "notes": "Table 15 lists query compression (q rank) for every sandbox candidate, so it is kept here; "
                     "the released PLM-1.8B has none. Rows 6-7's losses are read from Table 5's last two columns.",
            "post": "edge_jax.papers.plm.arch_stats:write_arch_stats", "record_notes": RECORD_NOTES,
        })
    return zero_shot(preset, {
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
        "post": "edge_jax.papers.plm.arch_stats:write_arch_stats", "record_notes": RECORD_NOTES,
    })
