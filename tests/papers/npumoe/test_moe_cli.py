"""End to end on a tiny trained MoE: calibration in a steps=0 run, `edge-jax moe calibrate | trace`,
a calibration file as moe.plan, and the one-line errors for mismatched or truncated files."""
import json
import os

import numpy as np
import pytest
from conftest import tiny_overrides

from edge_jax.cli import main
from edge_jax.config import load_config
from edge_jax.data.routing_trace import read_trace
from edge_jax.train.loop import train_and_evaluate

MOE = {"model.moe_experts": 8, "model.moe_top_k": 2, "model.moe_d_ff": 32, "model.moe_aux_weight": 0.01,
       "moe.chunk": 64, "moe.capacity": 16, "moe.group": 8, "moe.calib_batches": 2, "moe.time_batches": 1,
       "train.steps": 6, "train.eval_every": 6, "train.ckpt_every": 6}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    os.environ.setdefault("EDGE_JAX_DATA", os.environ.get("EDGE_JAX_TEST_DATA", str(root / "data")))
    wd = str(root / "base")
    train_and_evaluate(load_config("configs/npumoe.py", tiny_overrides(**MOE)), wd)
    return root, wd


def test_steps0_run_calibrates_and_reports(trained):
    root, wd = trained
    overrides = tiny_overrides(**{**MOE, "train.steps": 0, "moe.strategy": "npumoe", "moe.capacity": 0,
                                  "moe.group": 2, "moe.residency": True})
    cfg = load_config("configs/npumoe.py", {**overrides, "init_from": wd})
    out = train_and_evaluate(cfg, str(root / "npumoe"))
    with open(root / "npumoe" / "calibration.json") as f:
        cal = json.load(f)
    assert len(cal["per_layer"]) == 2 and all(len(layer["fallback"]) == 4 for layer in cal["per_layer"])
    assert out["moe/calls_per_layer"] > 1 and out["moe/fallback_pct"] > 0 and out["moe/ms_per_token"] > 0
    assert 0 <= out["moe/padding_pct"] < 100 and np.isfinite(out["moe/val_loss_change_pct"])
    # the written calibration is a valid moe.plan for a run that trains
    cfg = load_config("configs/npumoe.py", {**overrides, "train.steps": 2, "train.warmup_steps": 1,
                                            "moe.plan": str(root / "npumoe" / "calibration.json")})
    assert cfg.moe.plan


def test_overflow_fallback_run_drops_nothing(trained):
    """moe.overflow=fallback end to end (model forward, metrics, the timed runtime): a capacity far below the
    load drops nothing, the overflow shows as fallback %, the loss is the dropless one."""
    root, wd = trained
    overrides = tiny_overrides(**{**MOE, "train.steps": 0, "moe.strategy": "uniform", "moe.capacity": 4,
                                  "moe.group": 4, "moe.overflow": "fallback"})
    out = train_and_evaluate(load_config("configs/npumoe.py", {**overrides, "init_from": wd}), str(root / "fb"))
    assert out["moe/drop_pct"] == 0 and out["moe/fallback_pct"] > 50 and out["moe/ms_per_token"] > 0
    assert abs(out["moe/val_loss_change_pct"]) < 1e-3 and out["moe/calls_per_layer"] == 8 / 4 + 1


def test_calibrate_and_trace_commands(trained, capsys):
    root, wd = trained
    assert main(["moe", "calibrate", "--workdir", wd, "--batches", "1", "--out", str(root / "cal"),
                 "--config.moe.group=4"]) == 0
    text = capsys.readouterr().out
    assert "heldout_overlap@4_mean" in text and "cross_overlap@8_mean" in text
    assert main(["moe", "trace", "--workdir", wd, "--batches", "1", "--out", str(root / "traces")]) == 0
    trace = read_trace(root / "traces" / "pystdlib_validation.npz")
    assert trace.experts.shape == (trace.n_tokens, 2, 2) and trace.embeddings.shape[1] == 64
    assert trace.meta["split"] == "validation" and trace.n_tokens == 8 * 32


def test_bad_files_are_one_line_errors(trained, tmp_path, capsys):
    root, wd = trained
    path = root / "traces" / "pystdlib_validation.npz"
    if not path.exists():
        pytest.skip("needs the trace of test_calibrate_and_trace_commands")
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(Exception, match="truncated"):
        read_trace(cut)
    cal = json.loads((root / "cal" / "calibration.json").read_text())
    cal["n_experts"] = 4
    cal["per_layer"] = [dict(layer, load=layer["load"][:4]) for layer in cal["per_layer"]]
    (tmp_path / "cal.json").write_text(json.dumps(cal))
    overrides = tiny_overrides(**{**MOE, "train.steps": 0, "moe.strategy": "npumoe", "moe.capacity": 0})
    argv = ["train", "--config", "configs/npumoe.py", "--workdir", str(tmp_path / "w"),
            f"--config.init_from={wd}", f"--config.moe.plan={tmp_path / 'cal.json'}"]
    argv += [f"--config.{k}={v}" for k, v in overrides.items()]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "recalibrate" in err and "\n" not in err
    assert main(["moe", "trace", "--workdir", wd, "--out", str(tmp_path), "--config.train.steps=3"]) == 2


def test_trace_train_split_without_probs(trained, capsys):
    """--split train --no-probs: the same tokens and experts as a trace with probs, without them; more batches
    extend the trace (the first tokens of the split, in order)."""
    root, wd = trained
    base = ["moe", "trace", "--workdir", wd, "--split", "train"]
    assert main([*base, "--batches", "2", "--out", str(root / "full")]) == 0
    assert main([*base, "--batches", "2", "--no-probs", "--out", str(root / "bare")]) == 0
    assert main([*base, "--batches", "1", "--no-probs", "--out", str(root / "one")]) == 0
    assert "(no probs)" in capsys.readouterr().out
    full, bare, one = (read_trace(root / d / "pystdlib_train.npz") for d in ("full", "bare", "one"))
    assert full.probs is not None and bare.probs is None and bare.meta["split"] == "train"
    assert bare.n_tokens == 2 * 8 * 32 and len(bare.seq_starts) == 2 * 8
    for name in ("tokens", "seq_starts", "experts", "embeddings"):
        assert np.array_equal(getattr(full, name), getattr(bare, name)), name
    assert np.array_equal(one.tokens, bare.tokens[: one.n_tokens])
    assert np.array_equal(one.experts, bare.experts[: one.n_tokens])
