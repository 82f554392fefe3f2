"""MeKi §5.6: the dynamic projection G as SwiGLU (hidden d_model/2) vs one linear map.

    edge-jax grid ablations/meki_projection.py --preset tiny --seeds 3

Both fold into the same table, so inference cost is identical; only training FLOPs differ.
"""
from edge_jax.papers.meki.grid import MEKI, meki_grid


def get_grid(preset: str) -> dict:
    return meki_grid(
        preset, name="meki_projection", title="MeKi §5.6: G as SwiGLU vs linear",
        cells={"swiglu": MEKI, "linear": {"model.meki_projection": "linear"}},
        paper={"metric": "training loss and downstream accuracy (no numbers)", "higher_is_better": False,
               "source": "MeKi §5.6", "values": {"swiglu": None, "linear": None}, "order": ["swiglu", "linear"]})
