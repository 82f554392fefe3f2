"""NPUMoE Table 5 with the overflow processed: group size {1, 4, 8, 16} x per-expert capacity {16, ..., 128}.

    edge-jax grid ablations/npumoe_group_capacity_fallback.py --preset tiny --seeds 2

The cells of ablations/npumoe_group_capacity.py (moe.strategy=uniform, one capacity per 512-token
chunk for every expert, ``group`` experts per static call) with moe.overflow=fallback: the token
copies routed to an expert beyond its capacity are not dropped but run exactly on the fallback path,
the one cold experts take (the host CPU in the runtime that times the cells, the ragged call in the
model). Nothing is dropped, so every cell computes the dropless output; a small capacity moves work
from the static groups to the host. The paper's Table 5 latencies fall with capacity, which suggests it
processes the overflow (§5.7 mentions CPU fallback); this grid compares that reading with its ordering.
"""
from edge_jax.papers.npumoe.grid import group_capacity_cells, group_capacity_grid

CELLS = group_capacity_cells("fallback")


def get_grid(preset: str) -> dict:
    return group_capacity_grid(
        preset, "npumoe_group_capacity_fallback",
        "NPUMoE Table 5: group size x expert capacity, overflow processed on the fallback path", "fallback",
        "Cells are g<group size>_c<capacity>. Overflow (token copies routed to an expert beyond its capacity) "
        "is not dropped: it runs exactly on the fallback path with the cold experts (moe.overflow=fallback; "
        "in the timed runtime, one host-CPU call per chunk), so drop % is 0, fallback % is the overflow, "
        "the loss equals dropless, and ms/token includes the host's work on the overflow. "
        "npumoe_group_capacity drops the overflow instead.")
