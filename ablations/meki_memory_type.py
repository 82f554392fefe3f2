"""MeKi Table 3: static-only vs dynamic-only vs both memories (eqs. 15, 16, 3).

    edge-jax grid ablations/meki_memory_type.py --preset tiny --seeds 3
"""
from edge_jax.papers.meki.grid import BASELINE, MEKI, ZERO_SHOT, meki_grid


def get_grid(preset: str) -> dict:
    return meki_grid(
        preset, name="meki_memory_type", title="MeKi Table 3: static vs dynamic memory",
        cells={"baseline": BASELINE, "static_only": {"model.meki_dynamic": False},
               "dynamic_only": {"model.meki_static": False}, "meki": MEKI},
        paper={"metric": ZERO_SHOT, "higher_is_better": True, "source": "MeKi Table 3 (0.6B)",
               "values": {"baseline": 53.0, "static_only": 54.8, "dynamic_only": 54.7, "meki": 55.5}})
