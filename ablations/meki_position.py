"""MeKi Table 4 / Fig. 4: where the branch joins the layer.

    edge-jax grid ablations/meki_position.py --preset tiny --seeds 3

parallel_ffn (eq. 8) and parallel_attn share the FFN's / attention's pre-norm; after_attn and
after_ffn are sequential residual sub-blocks with their own pre-norm (see models/decoder.py).
"""
from edge_jax.papers.meki.grid import MEKI, ZERO_SHOT, meki_grid


def get_grid(preset: str) -> dict:
    return meki_grid(
        preset, name="meki_position", title="MeKi Table 4: injection position",
        cells={"parallel_ffn": MEKI, "parallel_attn": {"model.meki_position": "parallel_attn"},
               "after_attn": {"model.meki_position": "after_attn"},
               "after_ffn": {"model.meki_position": "after_ffn"}},
        paper={"metric": ZERO_SHOT, "higher_is_better": True, "source": "MeKi Table 4 (0.6B)",
               "values": {"parallel_ffn": 55.5, "parallel_attn": 55.1, "after_attn": 54.9, "after_ffn": 54.7}},
        notes="Fig. 4 (right) also shows parallel_ffn with the lowest validation loss.")
