"""MeKi Fig. 5: how the expert vector and the gate are fused (eq. 17 variants).

    edge-jax grid ablations/meki_fusion.py --preset tiny --seeds 3
"""
from edge_jax.papers.meki.grid import MEKI, meki_grid


def get_grid(preset: str) -> dict:
    return meki_grid(
        preset, name="meki_fusion", title="MeKi Fig. 5: feature fusion",
        cells={"add_sigmoid": MEKI, "mul_sigmoid": {"model.meki_fusion": "mul_sigmoid"},
               "add_silu": {"model.meki_fusion": "add_silu"}, "mul_silu": {"model.meki_fusion": "mul_silu"}},
        paper={"metric": "validation loss curves (no numbers)", "higher_is_better": False,
               "source": "MeKi §5.3, Fig. 5", "values": {c: None for c in
                                                        ("add_sigmoid", "mul_sigmoid", "add_silu", "mul_silu")},
               "order": ["add_sigmoid", ["mul_sigmoid", "add_silu", "mul_silu"]]},
        notes="The paper states only that additive-sigmoid is best; the other three are left unordered.")
