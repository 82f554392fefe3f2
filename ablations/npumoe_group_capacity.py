"""NPUMoE Table 5: group size {1, 4, 8, 16} x per-expert capacity {16, 32, 64, 96, 128}.

    edge-jax grid ablations/npumoe_group_capacity.py --preset tiny --seeds 2

Every expert gets the same fixed capacity per 512-token prefill chunk (moe.strategy=uniform), and
``group`` experts run as one static call (16: all of them in one call). Overflow is dropped by
saliency. The paper's per-token latencies (PhiMoE, 16 experts, top-2, M2 Ultra) are given where
its text states them.
"""
from edge_jax.papers.npumoe.grid import cell, grid

GROUPS = (1, 4, 8, 16)
CAPACITIES = (16, 32, 64, 96, 128)
# ms/token stated in NPUMoE §5.7 (Table 5 itself is an image): 1x32, 4x32, 8x32, 1x64, 4x64, 8x64, 1x128.
PAPER_MS = {"g1_c32": 0.31, "g4_c32": 0.27, "g8_c32": 0.26, "g1_c64": 0.23, "g4_c64": 0.19, "g8_c64": 0.18,
            "g1_c128": 0.16}
CELLS = {f"g{g}_c{c}": cell(strategy="uniform", capacity=c, group=g) for c in CAPACITIES for g in GROUPS}


def get_grid(preset: str) -> dict:
    return grid(preset, "npumoe_group_capacity", "NPUMoE Table 5: group size x expert capacity", CELLS,
                {"metric": "ms per token (PhiMoE prefill, M2 Ultra)", "higher_is_better": False,
                 "values": {name: PAPER_MS.get(name) for name in CELLS}, "source": "NPUMoE §5.7 / Table 5"},
                "Cells are g<group size>_c<capacity>. Small capacities drop many token copies (drop %), so "
                "their latency is not free: see the loss change against dropless.")
