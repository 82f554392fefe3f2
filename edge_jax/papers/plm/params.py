"""PLM Table 1's parameter counts, and the comparison ``edge-jax params`` prints beside ours.

    edge-jax params --config configs/plm.py:size=1p8b   # total / embedding / other vs PLM Table 1

The model shape is :data:`edge_jax.models.presets.MODEL_SIZES` ``plm_1p8b``.
"""
from __future__ import annotations

from edge_jax.models.count import PARAM_COMPARISONS, versus
from edge_jax.models.presets import matching_size

# PLM §2 / Table 1: 1.83B parameters, 0.31B of them the (tied) embedding.
PLM_PAPER = {"plm_1p8b": dict(total=1.83e9, embedding=0.31e9, non_embedding=1.51e9)}


@PARAM_COMPARISONS.register("plm_table1")
def table1(config, counts: dict) -> list[str]:
    """PLM-1.8B's shape without a token memory: total, embedding and the rest against Table 1."""
    size = matching_size(config.model, PLM_PAPER)
    if size is None or config.model.memory != "none":
        return []
    paper = PLM_PAPER[size]
    return [versus("PLM total", counts["total"], paper["total"]),
            versus("PLM embedding", counts["embedding"], paper["embedding"]),
            versus("PLM other", counts["non_embedding"], paper["non_embedding"])]
