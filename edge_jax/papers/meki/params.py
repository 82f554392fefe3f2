"""MeKi Table 5's parameter counts, and the comparison ``edge-jax params`` prints beside ours.

    edge-jax params --config configs/meki.py:size=qwen3_0p6b   # MeKi RAM / ROM vs Table 5
    edge-jax params --config configs/lm.py:size=qwen3_0p6b     # the dense baseline's RAM vs Table 5

The model shapes are :data:`edge_jax.models.presets.MODEL_SIZES` ``qwen3_*``; ``configs/meki.py``
reads the memory width ``d_mem`` of a paper size here.
"""
from __future__ import annotations

from edge_jax.models.count import PARAM_COMPARISONS, versus
from edge_jax.models.presets import matching_size

# RAM parameter counts of the dense Qwen3 baselines (MeKi Table 5).
DENSE_PARAMS = {"qwen3_0p6b": 0.60e9, "qwen3_1p7b": 1.75e9, "qwen3_4b": 4.12e9}

# MeKi Table 5: memory width and the RAM / ROM counts of MeKi-0.6B / 1.7B / 4B.
MEKI_PAPER = {
    "qwen3_0p6b": dict(d_mem=128, ram=0.60e9, rom=0.54e9),
    "qwen3_1p7b": dict(d_mem=256, ram=1.75e9, rom=1.09e9),
    "qwen3_4b": dict(d_mem=512, ram=4.12e9, rom=2.80e9),
}


@PARAM_COMPARISONS.register("meki_table5")
def table5(config, counts: dict) -> list[str]:
    """A Qwen3 paper shape: dense, its RAM against the baseline's; MeKi at the paper's ``d_mem``, its
    RAM and ROM against MeKi's. Nothing for other shapes, memories or widths."""
    model = config.model
    size = matching_size(model, DENSE_PARAMS)
    if size is None:
        return []
    if model.memory == "none":
        return [versus("paper (RAM)", counts["ram"], DENSE_PARAMS[size])]
    paper = MEKI_PAPER[size]
    if model.memory == "meki" and model.d_mem == paper["d_mem"]:
        return [versus("MeKi RAM", counts["ram"], paper["ram"]), versus("MeKi ROM", counts["rom"], paper["rom"])]
    return []
