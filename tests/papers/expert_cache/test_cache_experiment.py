"""Expert-cache configs, profiles, trace splits, one full run, ScoutGate reuse, the CLI, reports and the bench."""
import argparse
import json
import types

import numpy as np
import pytest

from edge_jax.cli import main
from edge_jax.config import ConfigError, load_config
from edge_jax.data.routing_trace import write_trace
from edge_jax.grid.spec import load_grid
from edge_jax.papers.expert_cache.config import needs_scout
from edge_jax.papers.expert_cache.engine import Simulator
from edge_jax.papers.expert_cache.experiment import ewma_probs, run_experiment
from edge_jax.papers.expert_cache.inputs import split_trace
from edge_jax.papers.expert_cache.profile import ProfileError, build_profile, capacities
from edge_jax.papers.expert_cache.report import write_policy_report, write_sensitivity_report
from edge_jax.papers.expert_cache.synthetic import synthetic_routing
from edge_jax.papers.expert_cache.watermark import Watermark

SMALL = {"synthetic.n_tokens": 1024, "synthetic.d_embed": 16, "synthetic.phase_tokens": 512,
         "scoutgate.steps": 20, "scoutgate.d_proj": 16, "scoutgate.batch": 64}


def small_config(policy="lru", **extra):
    return load_config(f"configs/cache.py:trace=synthetic,policy={policy}", {**SMALL, **extra})


def test_config_loads_and_rejects_bad_values():
    c = load_config("configs/cache.py")
    assert c.task == "cache_sim" and c.trace.path.endswith("seed{seed}/pystdlib_validation.npz")
    assert needs_scout(c) and not needs_scout(load_config("configs/cache.py:policy=lru"))
    with pytest.raises(ConfigError, match="predictor.eta must be in"):
        load_config("configs/cache.py", {"predictor.eta": 1.5})
    with pytest.raises(ConfigError, match="unknown config key 'cache.polcy'"):
        load_config("configs/cache.py", {"cache.polcy": "lru"})
    with pytest.raises(ConfigError, match="unknown cache.policy value"):
        load_config("configs/cache.py", {"cache.policy": "arc"})
    with pytest.raises(ConfigError, match="trace.path is empty"):
        load_config("configs/cache.py", {"trace.path": ""})


def test_profile_costs_and_capacity_errors():
    c = load_config("configs/cache.py")
    prof = build_profile(c.profile, 4, 16)
    s = 3 * 4096 * 6400 / 2
    assert prof.sizes[0] == s and prof.uniform
    assert prof.cost_g[0] == pytest.approx(10e-6 + s / 25e9)
    assert prof.cost_r[0] == pytest.approx(80e-6 + s / 7e9)
    assert prof.credit_g == pytest.approx(1e-4 * 25e9)
    with pytest.raises(ProfileError, match="raise it to at least 0.0312"):
        capacities(prof, 0.01, 0.6, 2)
    with pytest.raises(ProfileError, match="exceeds cache.ram_fraction"):
        capacities(prof, 0.7, 0.6, 2)
    c.profile.preset = "phone"
    phone = build_profile(c.profile, 4, 16)
    assert phone.sizes[0] == 3 * 2048 * 1408 / 2 and phone.cost_r[0] == pytest.approx(100e-6 + phone.sizes[0] / 4e9)
    assert phone.credit_g == pytest.approx(2e-3 * 15e9)     # 2 ms of compute at 15 GB/s: several experts a step
    c.profile.preset, c.profile.n_experts = "pcie4-nvme", 8
    with pytest.raises(ProfileError, match="the trace has 16 experts but profile.n_experts is 8"):
        build_profile(c.profile, 4, 16)
    c.profile.n_experts, c.profile.size_spread = 0, 0.3
    a, b = build_profile(c.profile, 4, 16, seed=1), build_profile(c.profile, 4, 16, seed=1)
    assert not a.uniform and np.array_equal(a.sizes, b.sizes) and a.sizes.min() >= 0.7 * s - 1


def test_split_by_sequences():
    trace = synthetic_routing(2000, 2, 8, 2, seed=0, n_seqs=10)
    train, ev = split_trace(trace, 0.3)
    assert train.n_tokens + ev.n_tokens == 2000 and len(train.seq_starts) == 7 and len(ev.seq_starts) == 3
    assert ev.seq_starts[0] == 0 and np.array_equal(ev.experts, trace.experts[train.n_tokens:])
    ev.validate()
    _, capped = split_trace(trace, 0.3, max_tokens=100)
    assert capped.n_tokens == 100
    capped.validate()


def test_ewma_probs_matches_the_policy_state():
    trace = synthetic_routing(50, 3, 8, 2, seed=2)
    probs = ewma_probs(trace.experts, 8, alpha=0.1, p0=-1.0)
    prof = build_profile(load_config("configs/cache.py").profile, 3, 8)
    pol = Watermark("ewma", eta=0.0, alpha=0.1)
    Simulator(prof, *capacities(prof, 0.5, 0.6, 2)).run(trace.experts[:20], pol)
    np.testing.assert_allclose(probs[20], pol.ewma, rtol=1e-6)
    np.testing.assert_allclose(probs[0], np.full((3, 8), 2 / 8))


def test_run_writes_metrics(tmp_path):
    m = run_experiment(small_config("lru"), tmp_path / "lru", log=lambda s: None)
    saved = json.loads((tmp_path / "lru" / "final_metrics.json").read_text())
    assert saved["stall_ms_per_token"] == pytest.approx(m["stall_ms_per_token"]) and m["stall_ms_per_token"] > 0
    assert m["accesses"] == m["trace_tokens"] * 4 * 2 and (tmp_path / "lru" / "config.json").exists()
    b = run_experiment(small_config("belady"), tmp_path / "bel", log=lambda s: None)
    assert b["belady_exact"] and b["belady_containment_violations"] == 0
    assert b["stall_ms_per_token"] <= m["stall_ms_per_token"]


def test_scoutgate_stage_is_reused_and_checked(tmp_path):
    stage = run_experiment(small_config("none"), tmp_path / "scout", log=lambda s: None)
    assert 0 < stage["scoutgate_recall_at_k"] <= 1 and (tmp_path / "scout" / "scoutgate.npz").exists()
    m = run_experiment(small_config("watermark", **{"scoutgate.from_dir": str(tmp_path / "scout")}),
                       tmp_path / "wm", log=lambda s: None)
    assert m["scoutgate_recall_at_k"] == pytest.approx(stage["scoutgate_recall_at_k"])
    assert not (tmp_path / "wm" / "scoutgate.npz").exists()
    with pytest.raises(ConfigError, match="trained with another train fingerprint.*retrain"):
        run_experiment(small_config("watermark", **{"scoutgate.from_dir": str(tmp_path / "scout"),
                                                    "trace.eval_fraction": 0.3}), tmp_path / "x", log=lambda s: None)


def test_cli_one_line_errors(tmp_path, capsys):
    trace = synthetic_routing(512, 4, 16, 2, seed=0, d_embed=8)
    path = write_trace(tmp_path / "t.npz", trace)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    rc = main(["cache", "run", "--config", "configs/cache.py:policy=lru", f"--config.trace.path={path}",
               "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "edge-jax: error:" in err
    rc = main(["cache", "run", "--config", "configs/cache.py:policy=lru,vram=0.01", "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "raise it to at least" in err and len(err.splitlines()) == 1
    synth = tmp_path / "s.npz"
    assert main(["cache", "synth", "--out", str(synth), "--tokens", "600"]) == 0
    rc = main(["cache", "run", "--config", "configs/cache.py:policy=fifo", f"--config.trace.path={synth}",
               "--config.profile.n_layers=8", "--workdir", str(tmp_path / "w2")])
    assert rc == 2 and "the trace has 4 layers but profile.n_layers is 8" in capsys.readouterr().err


def _record(cell, seed, trace, vram, policy, stall, **predictor):
    config = {"trace": {"source": trace}, "cache": {"vram_fraction": vram, "policy": policy},
              "predictor": {"eta": 0.5, "gamma": 0.5, "watermark_step": 0.05, "hysteresis": 0.1, **predictor}}
    metrics = {"stall_ms_per_token": stall, "vram_hit_pct": 50.0, "ram_hit_pct": 90.0, "gb_to_vram": 10.0,
               "gb_to_ram": 5.0}
    return {"cell": cell, "seed": seed, "config": config, "metrics": metrics}


def test_policy_report_tables_goal_and_plot(tmp_path):
    records = [_record(f"real-v{v}-{p}", s, "file", v / 100, p, stall * (1 + 0.01 * s))
               for s in (0, 1) for v in (20, 30) for p, stall in (("lru", 10.0), ("watermark", 7.0), ("belady", 5.0))]
    paths = write_policy_report(types.SimpleNamespace(title="T"), records, tmp_path)
    text = paths[0].read_text()
    assert "| 20% | — | 10.05 ± 0.07 |" not in text and "| 20% | 10.05 ± 0.07 | 7.04 ± 0.05 | 5.03 ± 0.04 |" in text
    assert "watermark / LRU = 0.700 (PASS), watermark / Belady = 1.400 (FAIL)" in text
    assert "watermark_pop" not in text
    records += [_record(f"real-v{v}-watermark_pop", s, "file", v / 100, "watermark_pop",
                        (6.0 + 0.3 * s) * (1 + 0.01 * s)) for s in (0, 1) for v in (20, 30)]
    text = write_policy_report(types.SimpleNamespace(title="T"), records, tmp_path)[0].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 20% | 1.2"))
    assert "| 0.879 ± 0.030 |" in row and row.endswith("| within noise |")     # 6/7 and 6.363/7.07; 2 seeds
    assert "watermark_pop / Belady = 1.230 (PASS, goal <= 1.3)" in text
    assert paths[1].stat().st_size > 1000


def test_sensitivity_report(tmp_path):
    records = [_record("default", 0, "file", 0.2, "watermark", 7.0),
               _record("eta_0", 0, "file", 0.2, "watermark", 8.0, eta=0.0),
               _record("eta_1", 0, "file", 0.2, "watermark", 9.0, eta=1.0)]
    md, png = write_sensitivity_report(types.SimpleNamespace(title="S"), records, tmp_path)
    assert "| 0 | 8.000 | 50.0 |" in md.read_text() and "| 0.5 | 7.000 |" in md.read_text() and png.exists()


def test_grids_load():
    policies = load_grid("ablations/cache_policies.py")
    assert len(policies.cells) == 80 and policies.post.endswith("write_policy_report")
    assert policies.cells["real-v20-watermark"]["scoutgate.from_dir"] == "{stage:scout_real}"
    assert "scoutgate.from_dir" not in policies.cells["real-v20-lru"]
    sens = load_grid("ablations/cache_sensitivity.py")
    assert "scoutgate.from_dir" not in sens.cells["eta_0"] and sens.cells["no_prefetch"]["profile.compute_ms"] == 0


def test_bench_runs_every_policy():
    from edge_jax.papers.expert_cache.bench import run
    args = argparse.Namespace(accesses=4000, layers=None, experts=16, top_k=2, vram=0.2, ram=0.6,
                              profile="pcie4-nvme", json=None, reference_accesses=2000, repeats=1)
    out = run(args, [])
    for p in ("fifo", "lru", "lfu", "ewma", "scoutgate", "watermark", "belady"):
        row = next(line for line in out.splitlines() if line.startswith(f"  {p} "))
        assert row.split()[5] == "yes", row     # the compiled replay of the shared prefix equals the reference's
    assert "compiled = reference: PASS" in out or "compiled = reference: FAIL" in out


def test_cells_of_one_trace_share_its_forecasts(tmp_path, monkeypatch):
    """A second run in one process on the same trace and ScoutGate reuses the first one's forecasts and gives
    the metrics the first computed afresh."""
    from edge_jax.papers.expert_cache import experiment, scoutgate
    calls = []
    predict = scoutgate.predict
    monkeypatch.setattr(scoutgate, "predict", lambda *a, **k: calls.append(1) or predict(*a, **k))
    stage = small_config("none")
    run_experiment(stage, tmp_path / "stage", log=lambda *a: None)
    cell = small_config("scoutgate", **{"scoutgate.from_dir": str(tmp_path / "stage")})
    experiment._RECENT.clear()
    first = run_experiment(cell, tmp_path / "a", log=lambda *a: None)
    assert len(experiment._RECENT) == 2       # the trace and the forecasts
    again = run_experiment(cell, tmp_path / "b", log=lambda *a: None)
    assert len(calls) == 2      # the stage's own, and the first cell's
    for key in ("stall_ms_per_token", "scoutgate_recall_at_k", "ewma_recall_at_k", "vram_hit_pct"):
        assert first[key] == again[key]
