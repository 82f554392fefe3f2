"""Offline MoE calibration: loads, Overlap@K, the calibration file and its report (pure numpy)."""
import json

import numpy as np
import pytest

from edge_jax.layers.moe.plan import tiered_plan, uniform_plan
from edge_jax.papers.npumoe.calibrate import (
    CalibrationError,
    calibration_markdown,
    expert_loads,
    overlap_at_k,
    overlap_summary,
    plan_estimates,
    read_calibration,
    write_calibration,
)


def _skewed_ids(rng, n, n_layers, n_experts, k):
    """Top-k ids [N, L, K] (distinct per token) from a skewed, layer-dependent routing."""
    ids = np.empty((n, n_layers, k), np.int64)
    for layer in range(n_layers):
        p = rng.dirichlet(np.full(n_experts, 0.5))
        for t in range(n):
            ids[t, layer] = rng.choice(n_experts, size=k, replace=False, p=p)
    return ids


def test_expert_loads_matches_loop():
    rng = np.random.default_rng(0)
    ids, valid = _skewed_ids(rng, 50, 3, 8, 2), rng.random(50) > 0.3
    want = np.zeros((3, 8), np.int64)
    for t in range(50):
        for layer in range(3):
            for e in ids[t, layer]:
                want[layer, e] += int(valid[t])
    got = expert_loads(ids, 8, valid)
    assert got.dtype == np.int64 and got.shape == (3, 8)
    np.testing.assert_array_equal(got, want)
    assert expert_loads(ids, 8).sum() == 50 * 3 * 2
    with pytest.raises(CalibrationError, match="n_experts"):
        expert_loads(ids, 4)


def test_overlap_cases():
    rng = np.random.default_rng(1)
    load = rng.integers(0, 100, (5, 16))
    np.testing.assert_array_equal(overlap_at_k(load, load, 4), np.ones(5))
    a = np.array([[9, 8, 7, 6, 0, 0, 0, 0]])
    b = np.array([[0, 0, 0, 0, 9, 8, 7, 6]])
    np.testing.assert_array_equal(overlap_at_k(a, b, 4), [0.0])
    # hand case: top-3 of a = {0, 1, 2}; b = {0, 2, 5}; ties in b (5, 5 on experts 2, 3) keep id 2
    b = np.array([[10, 0, 5, 5, 0, 7, 0, 0]])
    np.testing.assert_allclose(overlap_at_k(a, b, 3), [2 / 3])
    s = overlap_summary(np.vstack([a, a]), np.vstack([a, b]), ks=(3, 8))
    assert s == pytest.approx({"overlap@3_median": 5 / 6, "overlap@3_mean": 5 / 6,
                               "overlap@8_median": 1.0, "overlap@8_mean": 1.0})
    with pytest.raises(CalibrationError, match="K <= 8"):
        overlap_at_k(a, b, 9)


def test_plan_estimates_hand_case():
    load = [8, 4, 2, 2]  # shares .5 .25 .125 .125 -> expected rows 8 4 2 2 of chunk 8 * top_k 2
    pad, drop = plan_estimates(uniform_plan(4, 4, 2), load, chunk=8, top_k=2)
    assert (pad, drop) == pytest.approx((4 / 16, 4 / 16))  # experts 2, 3 pad 2 each; expert 0 drops 4
    plan = tiered_plan(load, 8, 2, multipliers=(0.5, 1.0, 2.0), hot_fraction=0.5)  # tiers 2, 4, 8
    assert plan.capacity == (8, 4, 0, 0) and plan.fallback == (2, 3)
    assert plan_estimates(plan, load, 8, 2) == pytest.approx((0.0, 0.0))


def _write(tmp_path):
    rng = np.random.default_rng(2)
    loads = expert_loads(_skewed_ids(rng, 64, 3, 8, 2), 8)
    plans = [tiered_plan(row, 16, 2, hot_fraction=0.75) for row in loads]
    ov = overlap_summary(loads, expert_loads(_skewed_ids(rng, 64, 3, 8, 2), 8), ks=(4,))
    path = tmp_path / "calib.json"
    rec = write_calibration(path, loads, [1, 3, 5], 8, 2, 16, meta={"data": "x"}, plans=plans, overlap=ov)
    return path, loads, plans, rec


def test_round_trip_and_markdown(tmp_path):
    path, loads, plans, rec = _write(tmp_path)
    on_disk = json.loads(path.read_text())
    assert on_disk == rec and on_disk["version"] == 1 and on_disk["layers"] == [1, 3, 5]
    lay = on_disk["per_layer"][0]
    assert lay["ranking"] == sorted(range(8), key=lambda e: (-loads[0, e], e))
    assert lay["capacity"] == list(plans[0].capacity) and len(lay["hot"]) + len(lay["fallback"]) == 8
    assert 0 <= lay["padding_estimate"] <= 1 and 0 <= lay["drop_estimate"] <= 1
    cal = read_calibration(path, n_layers=3, n_experts=8)
    np.testing.assert_array_equal(cal.loads, loads)
    assert (cal.layers, cal.n_experts, cal.top_k, cal.chunk) == ((1, 3, 5), 8, 2, 16)
    assert cal.meta == {"data": "x"} and set(cal.overlap) == {"overlap@4_median", "overlap@4_mean"}
    md = calibration_markdown(cal, plans)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| layer")]
    assert [r.split(" | ")[0] for r in rows] == ["| 1", "| 3", "| 5"]
    assert "overlap@4_mean" in md


def test_read_errors(tmp_path):
    with pytest.raises(CalibrationError, match="edge-jax moe calibrate --workdir W"):
        read_calibration(tmp_path / "missing.json")
    path, *_ = _write(tmp_path)
    text = path.read_text()
    with pytest.raises(CalibrationError, match=r"has 3 MoE layers of 8 experts but the model has 4 of 16; "
                                               r"recalibrate with `edge-jax moe calibrate --workdir run1`"):
        read_calibration(path, n_layers=4, n_experts=16, workdir="run1")
    with pytest.raises(CalibrationError, match="but the model has 3 of 16"):
        read_calibration(path, n_experts=16)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(CalibrationError, match="unreadable or truncated") as err:
        read_calibration(path)
    assert "\n" not in str(err.value)
    path.write_text(text.replace('"version": 1', '"version": 2'))
    with pytest.raises(CalibrationError, match="version 2"):
        read_calibration(path)
