"""`edge-jax bench moe` at a tiny shape: every variant row, the ratio and goal lines, the JSON
(ratios consistent with the per-variant times; no timing assertions beyond positivity)."""
import json

import pytest

from edge_jax.cli import main
from edge_jax.papers.npumoe import bench as M

TINY = ["--d-model", "32", "--d-ff", "32", "--experts", "8", "--chunk", "64", "--chunks", "1", "--repeats", "1"]


def test_bench_prints_variants_ratios_goals(capsys, tmp_path):
    path = tmp_path / "moe.json"
    assert main(["bench", "moe", *TINY, "--json", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("moe benchmark (NPUMoE Fig. 17 / Table 5): d_model 32, d_ff 32, 8 experts top-2, "
                               "chunk 64 x 1 timed chunks")
    assert "calibration: 8 separate chunks" in lines[1]
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and line.split()[0] in
            M.ABLATION + M.GROUPING}
    assert set(rows) == set(M.ABLATION + M.GROUPING)
    assert "fallback" in rows["+residency"] and "(all)" in rows["+residency"]
    assert "C 16x8 (G 1)" in rows["per_expert"] and "C 16x8 (G 4)" in rows["grouped"]
    text = "\n".join(lines)
    assert "ratios: grouped/per_expert = " in text and "ablation vs base: +tiers" in text
    assert "all vs base = " in text
    assert "dispatch: one jitted call costs" in text and "fallback call alone (host CPU, " in text
    goals = [line.strip() for line in lines if line.strip().startswith(("PASS:", "FAIL:"))]
    assert len(goals) == 2
    assert "grouped >= 1.3x per_expert" in goals[0] and "all >= 2.5x base" in goals[1]
    assert lines[-1] == f"  wrote {path}"

    r = json.loads(path.read_text())["result"]
    v = r["variants"]
    assert all(v[n]["ms_per_token"] > 0 for n in v)
    assert [v[n]["calls"] for n in ("base", "+tiers", "per_expert", "grouped")] == [8, 8, 8, 2]
    assert v["+grouping"]["calls"] < 8 and v["+residency"]["calls"] <= v["+grouping"]["calls"]
    assert all(v[n]["max_diff"] < 1e-4 for n in v)
    assert r["fallback_ms_per_chunk"] > 0 and r["dispatch_us"] > 0 and len(r["fallback_experts"]) == 4
    assert v["per_expert"]["drop"] > 0 and v["base"]["padding"] > v["+tiers"]["padding"]
    ratio = v["per_expert"]["ms_per_token"] / v["grouped"]["ms_per_token"]
    assert r["grouped_vs_per_expert"] == pytest.approx(ratio, rel=1e-6)
    all_ratio = v["base"]["ms_per_token"] / v["+residency"]["ms_per_token"]
    assert r["speedup_vs_base"]["+residency"] == pytest.approx(all_ratio, rel=1e-6)


def test_bench_rejects_bad_shape(capsys):
    assert main(["bench", "moe", *TINY, "--top-k", "9"]) == 2
    assert "--top-k 9 must lie in [1, --experts 8]" in capsys.readouterr().err


def test_bench_overflow_and_table5_sweep(capsys, tmp_path):
    """--overflow fallback: no variant drops; --capacities: the sweep under both policies, exact where the
    overflow is processed, with its spread and the small/large capacity latency ratio per group."""
    path = tmp_path / "moe.json"
    argv = ["bench", "moe", *TINY, "--overflow", "fallback", "--capacities", "4,16", "--sweep-groups", "4"]
    assert main([*argv, "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert "overflow fallback;" in text.splitlines()[0] and "Table 5 sweep" in text
    assert "drop: latency c4 / c16 = g4 " in text and "fallback: latency c4 / c16 = g4 " in text
    r = json.loads(path.read_text())["result"]
    assert r["overflow"] == "fallback" and all(v["drop"] == 0 for v in r["variants"].values())
    assert all(v["max_diff"] < 1e-4 for v in r["variants"].values())
    assert r["variants"]["grouped"]["calls"] == 2 + 1  # the host fallback call carries the overflow
    sweep = r["sweep"]
    assert set(sweep) == {"drop", "fallback"} and set(sweep["drop"]) == {"g4_c4", "g4_c16"}
    for name, v in sweep["fallback"].items():
        d = sweep["drop"][name]
        assert v["drop"] == 0 and v["fallback"] == pytest.approx(d["drop"]) and d["drop"] > 0
        assert v["max_diff"] < 1e-4 and 0 < v["ms_p25"] <= v["ms_per_token"] <= v["ms_p75"]
        assert v["calls"] == d["calls"] + 1
    assert main([*argv[:-4], "--capacities", "4,x"]) == 2
    assert "--capacities takes comma-separated positive integers" in capsys.readouterr().err
