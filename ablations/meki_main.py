"""MeKi Table 1: dense baseline vs MeKi at two scales.

    edge-jax grid ablations/meki_main.py --preset tiny --seeds 2

Tiny: d_model 128 and 192 (d_mem 64 and 96). Paper: Qwen3-0.6B and -1.7B shapes, d_mem 128 and 256.
"""
from edge_jax.papers.meki.grid import (
    BASELINE,
    MEKI,
    PAPER_1P7B,
    TINY_PLUS,
    ZERO_SHOT,
    meki_grid,
)


def get_grid(preset: str) -> dict:
    bigger = TINY_PLUS if preset == "tiny" else PAPER_1P7B
    return meki_grid(
        preset, name="meki_main", title="MeKi Table 1: dense baseline vs MeKi at two scales",
        cells={"baseline": BASELINE, "meki": MEKI,
               "baseline_plus": {**bigger, **BASELINE}, "meki_plus": {**bigger, **MEKI}},
        paper={"metric": ZERO_SHOT, "higher_is_better": True, "source": "MeKi Table 1 (0.6B and 1.7B rows)",
               "values": {"baseline": 53.0, "meki": 55.5, "baseline_plus": 56.0, "meki_plus": 59.7}},
        notes="The _plus cells are the larger scale (paper: 1.7B).")
