"""`edge-jax bench train-loop` measures both loops and prints a ratio for each case."""
import argparse
import re

from edge_jax.bench.train_loop import DISPATCH_STEPS, case_config, run


def test_dispatch_case_prints_both_loops_and_their_ratio(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGE_JAX_DATA", str(tmp_path / "data"))
    args = argparse.Namespace(config="configs/lm.py:size=tiny", steps=2, log_every=5, case="dispatch", repeats=1)
    config = case_config(args, ["seed=3"], "dispatch")
    assert config.train.steps == 2 * DISPATCH_STEPS and config.model.n_layers == 1 and config.seed == 3
    report = run(args, [])
    loop, minimal = (float(re.search(rf"{name}: +([0-9.]+) ms/step", report).group(1)) for name in ("loop", "minimal"))
    ratio = float(re.search(r"ratio minimal/loop = ([0-9.]+)", report).group(1))
    assert loop > 0 and minimal > 0 and ratio > 0
    assert "compute:" not in report and "dispatch: d_model 64 x 1 layers" in report
