import json
import math
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from conftest import tiny_overrides
from helpers import compile_flags, requires_devices

from edge_jax.train.loop import TrainingError, train_and_evaluate
from edge_jax.train.metrics import read_jsonl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def losses(workdir):
    return {r["step"]: r["loss"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r["kind"] == "train"}


def test_train_loss_falls_and_writes_outputs(tiny_config, tmp_path):
    wd = str(tmp_path / "run")
    result = train_and_evaluate(tiny_config(**{"train.steps": 30, "train.lr": 1e-2}), wd)
    curve = losses(wd)
    assert sorted(curve) == list(range(1, 31))
    assert np.mean([curve[s] for s in range(26, 31)]) < np.mean([curve[s] for s in range(1, 6)]) - 0.5
    assert math.isfinite(result["val_loss"]) and result["val_ppl"] == pytest.approx(math.exp(result["val_loss"]))
    assert os.path.isdir(os.path.join(wd, "tb")) and os.path.exists(os.path.join(wd, "config.json"))
    steps = sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints")) if d.isdigit())
    assert steps[-1] == 30 and len(steps) <= 3  # keep_ckpts=3
    from edge_jax.train.evaluate import evaluate_workdir
    again = evaluate_workdir(wd, num_batches=2)
    assert again["step"] == 30 and again["val_loss"] == pytest.approx(result["val_loss"], rel=1e-6)


def test_grad_accumulation_matches_full_batch(tiny_config, tmp_path):
    a = train_and_evaluate(tiny_config(**{"train.steps": 4}), str(tmp_path / "a"))
    b = train_and_evaluate(tiny_config(**{"train.steps": 4, "train.grad_accum": 4}), str(tmp_path / "b"))
    la, lb = losses(str(tmp_path / "a")), losses(str(tmp_path / "b"))
    np.testing.assert_allclose([la[s] for s in range(1, 5)], [lb[s] for s in range(1, 5)], rtol=1e-5)
    assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-4)


@requires_devices(8)
# data x fsdp x tensor in the fast tier (every axis sharded); data-parallel alone with -m slow
@pytest.mark.parametrize("mesh", [pytest.param({"mesh.data": 8}, marks=pytest.mark.slow),
                                  {"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}])
def test_eight_devices_match_one(tiny_config, tmp_path, mesh):
    assert jax.device_count() >= 8, "conftest sets 8 simulated CPU devices"
    one = tiny_config(**{"train.steps": 6})
    many = tiny_config(**{"train.steps": 6, **mesh})
    train_and_evaluate(one, str(tmp_path / "one"), devices=jax.devices()[:1])
    train_and_evaluate(many, str(tmp_path / "many"), devices=jax.devices()[:8])
    l1, l8 = losses(str(tmp_path / "one")), losses(str(tmp_path / "many"))
    np.testing.assert_allclose([l1[s] for s in range(1, 7)], [l8[s] for s in range(1, 7)], rtol=2e-5)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_config, tmp_path):
    wd = str(tmp_path / "nan")
    cfg = tiny_config(**{"train.steps": 40, "train.lr": 1e6, "train.warmup_steps": 1, "train.clip_norm": 0.0,
                         "train.ckpt_every": 1})
    with pytest.raises(TrainingError, match=r"at step \d+; the last healthy checkpoint is step \d+ ") as e:
        train_and_evaluate(cfg, wd)
    assert "\n" not in str(e.value)
    bad = int(str(e.value).split("at step ")[1].split(";")[0])
    saved = sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints")) if d.isdigit())
    assert saved and saved[-1] == bad - 1
    text = str(e.value)
    good = int(text.split("healthy checkpoint is step ")[1].split()[0])
    assert good in saved and f"--config.init_from={wd} --config.init_step={good} --config.train.lr=5e+05" in text


def _cli(workdir, steps, data_dir):
    over = tiny_overrides(**{"train.steps": steps, "train.ckpt_every": 10, "train.eval_every": 1000})
    args = [sys.executable, "-m", "edge_jax.cli", "train", "--config", "configs/lm.py:size=tiny",
            "--workdir", workdir] + [f"--config.{k}={v}" for k, v in over.items()]
    env = dict(os.environ, EDGE_JAX_DATA=data_dir, XLA_FLAGS=compile_flags())
    return args, env


def _finished_steps(workdir):
    """The checkpoint steps that are complete: orbax renames a step's directory to its number only once
    every file is written, and checksums.json goes in just before that rename (edge_jax.train.checksums)."""
    directory = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(directory):
        return []
    return sorted(int(d) for d in os.listdir(directory)
                  if d.isdigit() and os.path.exists(os.path.join(directory, d, "checksums.json")))


def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    data_dir = os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data"))
    steps = 150
    ref, killed = str(tmp_path / "ref"), str(tmp_path / "killed")
    args, env = _cli(ref, steps, data_dir)
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    args, env = _cli(killed, steps, data_dir)
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Kill once a checkpoint past the first (every 10 steps) is complete and steps after it are logged, so
    # the resumed run must restore it and redo logged steps. No clock races the training: the limit only
    # turns a hung run into a loud failure.
    limit = time.monotonic() + 900
    try:
        while proc.poll() is None:
            done = _finished_steps(killed)
            if done and done[-1] >= 20 and max(losses(killed), default=0) > done[-1]:
                os.kill(proc.pid, signal.SIGKILL)
                break
            if time.monotonic() > limit:
                pytest.fail(f"no finished checkpoint past step 20 in {killed}/checkpoints after 900 s; "
                            f"the run may hang (saved: {done})")
            time.sleep(0.01)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, (f"the run exited ({proc.returncode}) before a checkpoint past "
                                                f"step 20 was complete; it was never killed")
    assert max(losses(killed)) < steps
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    a, b = losses(ref), losses(killed)
    assert sorted(b) == list(range(1, steps + 1))
    assert [a[s] for s in sorted(a)] == [b[s] for s in sorted(b)]  # bitwise on CPU
    with open(os.path.join(ref, "final_metrics.json")) as f, open(os.path.join(killed, "final_metrics.json")) as g:
        assert json.load(f)["val_loss"] == json.load(g)["val_loss"]


def test_resume_with_another_model_is_refused(tiny_config, tmp_path):
    wd = str(tmp_path / "run")
    train_and_evaluate(tiny_config(**{"train.steps": 3}), wd)
    with pytest.raises(TrainingError, match=r"different model\.d_model; use a new --workdir"):
        train_and_evaluate(tiny_config(**{"train.steps": 5, "model.d_model": 32}), wd)
    train_and_evaluate(tiny_config(**{"train.steps": 5}), wd)  # more steps: resumes
    assert sorted(losses(wd)) == [1, 2, 3, 4, 5]


def test_checkpoint_tokenizer_mismatch_is_one_line(tmp_path):
    from types import SimpleNamespace

    from edge_jax.config import ConfigError, base_config
    from edge_jax.train.setup import check_tokenizer
    config = base_config()
    config.model.vocab_size = 320
    check_tokenizer(str(tmp_path), SimpleNamespace(name="spm4096-aaaa", vocab_size=300), config, write=True)
    check_tokenizer(str(tmp_path), SimpleNamespace(name="spm4096-aaaa", vocab_size=300), config)  # same: fine
    with pytest.raises(ConfigError, match="was trained with tokenizer spm4096-aaaa") as e:
        check_tokenizer(str(tmp_path), SimpleNamespace(name="spm4096-bbbb", vocab_size=300), config)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="fewer than the tokenizer's 400 ids"):
        check_tokenizer(str(tmp_path / "new"), SimpleNamespace(name="x", vocab_size=400), config)


def test_resume_check_accepts_tuple_keys_and_names_real_changes(tmp_path):
    from edge_jax.config import base_config
    from edge_jax.train.loop import TrainingError, save_config
    config = base_config()
    (tmp_path / "checkpoints").mkdir()
    save_config(config, str(tmp_path))
    save_config(config, str(tmp_path))          # engram_orders (2, 3) reads back as [2, 3]: same run
    config.model.engram_layers = (2,)
    with pytest.raises(TrainingError, match="model.engram_layers"):
        save_config(config, str(tmp_path))
