"""NPUMoE Table 5: group size {1, 4, 8, 16} x per-expert capacity {16, 32, 64, 96, 128}, overflow dropped.

    edge-jax grid ablations/npumoe_group_capacity.py --preset tiny --seeds 2

Every expert gets the same fixed capacity per 512-token prefill chunk (moe.strategy=uniform), and
``group`` experts run as one static call (16: all of them in one call). Overflow is dropped
(moe.overflow=drop, NPUMoE §4.1; latest tokens first: moe.drop=position comes with configs/npumoe.py's
default strategy, and the table's record notes say which order each cell ran with);
ablations/npumoe_group_capacity_fallback.py runs it on the
fallback path instead. The paper's per-token latencies (PhiMoE, 16 experts, top-2, M2 Ultra) are given
where its text states them.
"""
from edge_jax.papers.npumoe.grid import group_capacity_cells, group_capacity_grid

CELLS = group_capacity_cells("drop")


def get_grid(preset: str) -> dict:
    return group_capacity_grid(
        preset, "npumoe_group_capacity", "NPUMoE Table 5: group size x expert capacity", "drop",
        "Cells are g<group size>_c<capacity>. Overflow (token copies routed to an expert beyond its capacity) "
        "is dropped (moe.overflow=drop; which copies first: the record notes), so small capacities do less work: their "
        "latency is not free, see the drop % and the loss change against dropless. "
        "npumoe_group_capacity_fallback runs the overflow on the fallback path instead.")
