"""PLM §7.2 / Table 14 / Fig. 11: ReLU² vs SwiGLU vs ReLU vs GELU, activation sparsity rate.

    edge-jax grid ablations/plm_activation.py --preset tiny --seeds 3

Each cell trains PLM with another FFN (at matched parameters), then Algorithm 1 finds the largest
fraction of FFN activations that can be zeroed (smallest |a| first) for a perplexity increase of at
most 1% of the unmasked perplexity (the headline: scale-free), and beside it for the paper's absolute
increase of at most 1 (at a tiny model's perplexity of about 6 that allows a 17% rise). The post hook
draws Fig. 11 (perplexity increase against the masked fraction).
"""
from edge_jax.papers.plm.grid import RECORD_NOTES, base, notes, variant, zero_shot


def get_grid(preset: str) -> dict:
    cells = {"relu2": {}}
    cells.update({ffn: variant(preset, ffn=ffn) for ffn in ("swiglu", "relu", "gelu")})
    return zero_shot(preset, {
        "name": "plm_activation",
        "title": "PLM Table 14 / Fig. 11: activation sparsity rate of ReLU² vs SwiGLU, ReLU, GELU",
        "base": base(preset), "base_overrides": {}, "cells": cells,
        "metric": "sparsity_rate", "lower_is_better": False,
        "extra_metrics": ["sparsity_rate_abs", "val_loss", "zero_fraction", "executed_fraction"],
        "paper": {"metric": "activation sparsity rate (Algorithm 1, Δppl = 1)", "higher_is_better": True,
                  "values": {"relu2": 0.909, "swiglu": 0.09},
                  "source": "PLM Table 14: PLM-1.8B 0.909; SwiGLU models 0.001-0.09 (0.09 the highest)"},
        "record_notes": RECORD_NOTES,
        "notes": notes(preset, (
            "Paper cells are different models: PLM-1.8B (ReLU²) against nine SwiGLU LLMs; the SwiGLU value "
            "is the highest of them (Yulan-Mini). ReLU and GELU are not in the paper. Our sparsity_rate uses "
            "Δppl <= 1% of the model's own perplexity, since the paper's Δppl <= 1 is lenient at a tiny "
            "model's perplexity; sparsity_rate_abs is the paper's criterion. zero_fraction is the "
            "share of activations that are exactly zero with nothing masked; executed_fraction is Table 14's "
            "last column (parameters still multiplied after masking / all parameters).")),
        "post": "edge_jax.papers.plm.sparsity_report:write_sparsity_curves",
    })
