"""The two Table 5 grids (ablations/npumoe_group_capacity*.py): the same cells and paper values, the
drop grid's cells as they always were, the fallback grid's with moe.overflow=fallback; every cell validates."""
from pathlib import Path

from edge_jax.config import load_config
from edge_jax.grid import spec

REPO = Path(__file__).resolve().parents[3]


def test_drop_and_fallback_grids_share_cells_and_paper_values():
    drop = spec.load_grid(REPO / "ablations" / "npumoe_group_capacity.py", "tiny")
    fb = spec.load_grid(REPO / "ablations" / "npumoe_group_capacity_fallback.py", "tiny")
    assert (drop.name, fb.name) == ("npumoe_group_capacity", "npumoe_group_capacity_fallback")
    assert list(drop.cells) == list(fb.cells) and len(drop.cells) == 20 and "fallback path" in fb.title
    assert drop.cells["g8_c64"] == {"train.steps": 0, "init_from": "{stage:moe}", "moe.strategy": "uniform",
                                    "moe.capacity": 64, "moe.group": 8}  # unchanged: earlier runs still match
    assert all(fb.cells[c] == {**drop.cells[c], "moe.overflow": "fallback"} for c in drop.cells)
    assert drop.paper == fb.paper and len(drop.paper.order) == 7
    assert "dropped" in drop.notes and "not dropped" in fb.notes
    for cell in fb.cells:
        cfg = load_config(fb.base, fb.overrides(cell, 0))
        assert cfg.moe.overflow == "fallback" and cfg.moe.strategy == "uniform"
    assert load_config(drop.base, drop.overrides("g1_c32", 0)).moe.overflow == "drop"


def test_both_grids_explain_the_pairs_a_larger_capacity_or_group_wins():
    from edge_jax.papers.npumoe.grid import DROPPED_OVERFLOW, GROUPING_ON_CPU, HOST_FALLBACK_ON_CPU, capacity, group
    drop = spec.load_grid(REPO / "ablations" / "npumoe_group_capacity.py", "tiny")
    fb = spec.load_grid(REPO / "ablations" / "npumoe_group_capacity_fallback.py", "tiny")
    ranks = drop.paper.ranks()
    claimed = {f"{a}>{b}" for a in ranks for b in ranks if ranks[a] < ranks[b]}
    by_capacity = {k for k in claimed if capacity(k.split(">")[0]) > capacity(k.split(">")[1])}
    by_group = {k for k in claimed if capacity(k.split(">")[0]) == capacity(k.split(">")[1])}
    assert len(by_capacity) == 15 and len(by_group) == 6
    assert all(group(k.split(">")[0]) > group(k.split(">")[1]) for k in by_group)
    for g, reason in ((drop, DROPPED_OVERFLOW), (fb, HOST_FALLBACK_ON_CPU)):
        assert set(g.explanations) == by_capacity | by_group
        assert {g.explanations[k] for k in by_capacity} == {reason}
        assert {g.explanations[k] for k in by_group} == {GROUPING_ON_CPU}
    assert group("g16_c128") == 16 and capacity("g16_c128") == 128
