"""Resuming past a damaged checkpoint: the newest readable step wins, with one warning line."""
import os
import shutil

import numpy as np
import pytest
from trained_runs import tiny_run

from edge_jax.train.checkpoint import CheckpointError
from edge_jax.train.loop import TrainingError, train_and_evaluate
from edge_jax.train.metrics import read_jsonl


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run of 8 steps with checkpoints at steps 4 and 8 (made once per process; tests copy it)."""
    return tiny_run(tmp_path_factory)


def _losses(workdir):
    return {r["step"]: r["loss"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r["kind"] == "train"}


def _damage(workdir, step):
    """Overwrite every file of the step's train state with random bytes of the same length."""
    rng = np.random.default_rng(step)
    root = os.path.join(workdir, "checkpoints", str(step), "state")
    files = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    assert files
    for path in files:
        size = max(os.path.getsize(path), 16)
        with open(path, "wb") as f:
            f.write(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(trained, tiny_config, tmp_path, capfd):
    wd, clean = str(tmp_path / "run"), str(tmp_path / "clean")
    shutil.copytree(trained, wd)                                       # checkpoints at steps 4 and 8
    shutil.copytree(trained, clean)
    shutil.rmtree(os.path.join(clean, "checkpoints", "8"))             # the same run, honestly stopped at 4
    train_and_evaluate(tiny_config(**{"train.steps": 12}), clean)
    _damage(wd, 8)
    capfd.readouterr()
    result = train_and_evaluate(tiny_config(**{"train.steps": 12}), wd)
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1
    assert "checkpoint step 8 in " in warnings[0] and "is damaged" in warnings[0]
    assert "using step 4, the bad step kept in " in warnings[0] and "checkpoints.corrupt" in warnings[0]
    assert os.path.isdir(os.path.join(wd, "checkpoints.corrupt", "8"))
    saved = sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints")) if d.isdigit())
    assert saved[-1] == 12 and 8 in saved                             # step 8 written again
    # steps 5..12 were retrained from step 4, exactly as by a run whose last checkpoint was step 4
    a, b = _losses(clean), _losses(wd)
    assert [b[s] for s in range(5, 13)] == [a[s] for s in range(5, 13)]
    assert np.isfinite(result["val_loss"])


def test_no_readable_checkpoint_is_one_line_naming_the_directory(trained, tiny_config, tmp_path):
    wd = str(tmp_path / "run")
    shutil.copytree(trained, wd)
    for step in (4, 8):
        _damage(wd, step)
    with pytest.raises(CheckpointError) as e:
        train_and_evaluate(tiny_config(**{"train.steps": 12}), wd)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"no intact checkpoint in {os.path.join(wd, 'checkpoints')} ")
    assert "step 8: " in message and "step 4: " in message and "delete that directory" in message
    assert not os.path.exists(os.path.join(wd, "checkpoints.corrupt"))  # nothing moved


def test_a_divergence_before_the_first_checkpoint_says_so(tiny_config, tmp_path):
    cfg = tiny_config(**{"train.steps": 40, "train.lr": 1e6, "train.warmup_steps": 1, "train.clip_norm": 0.0,
                         "train.ckpt_every": 1000})
    with pytest.raises(TrainingError, match=r"at step \d+; no checkpoint to go back to: start over with a new "
                                            r"--workdir and a lower train.lr \(e.g. --config.train.lr=5e\+05\)"):
        train_and_evaluate(cfg, str(tmp_path / "nan"))


def test_evaluating_a_workdir_uses_the_newest_readable_step(trained, tmp_path, capfd):
    from edge_jax.train.evaluate import evaluate_workdir
    wd = str(tmp_path / "run")
    shutil.copytree(trained, wd)
    _damage(wd, 8)
    capfd.readouterr()
    assert evaluate_workdir(wd, num_batches=1)["step"] == 4
    err = capfd.readouterr().err
    assert "warning: checkpoint step 8 in " in err and "using step 4" in err and "kept in" not in err
    assert os.path.isdir(os.path.join(wd, "checkpoints", "8"))          # a reader moves nothing


def test_init_from_a_workdir_with_a_damaged_latest_step_uses_the_previous_one(trained, tmp_path, capfd):
    from edge_jax.train.init_from import restore_params
    wd = str(tmp_path / "base")
    shutil.copytree(trained, wd)
    _damage(wd, 8)
    capfd.readouterr()
    params, _ = restore_params(wd)
    assert params and "warning: checkpoint step 8 in " in capfd.readouterr().err
    _damage(wd, 4)
    with pytest.raises(CheckpointError, match="no intact checkpoint in "):
        restore_params(wd)
