"""Checkpoints prove they are intact: checksums written at commit, verified on restore, damaged steps passed over."""
import json
import os
import shutil

import numpy as np
import pytest
from trained_runs import tiny_run

from edge_jax.train import checksums, divergence
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.loop import train_and_evaluate


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run of 8 steps with checkpoints at steps 4 and 8 (made once per process; tests copy it)."""
    return tiny_run(tmp_path_factory)


def _scribble(path: str, seed: int, n: int = 4096) -> None:
    """Write ``n`` random bytes into the file at offset 200,000 (or its middle, for a smaller file)."""
    size = os.path.getsize(path)
    offset = 200_000 if size > 200_000 + n else max(size // 2 - n // 2, 0)
    data = np.random.default_rng(seed).integers(0, 256, min(n, max(size, 1)), dtype=np.uint8).tobytes()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_every_step_carries_checksums_of_all_its_files(trained):
    for step in (4, 8):
        step_dir = os.path.join(trained, "checkpoints", str(step))
        listed = json.load(open(os.path.join(step_dir, checksums.FILE)))
        assert listed["algorithm"] == "xxh3_128"
        assert sorted(listed["files"]) == checksums.step_files(step_dir)
        assert any(rel.startswith("state/") and "/d/" in rel for rel in listed["files"])    # the array files
        assert not any(rel.endswith(checksums.FILE) for rel in listed["files"])  # items carry none of their own
        assert checksums.verify(step_dir) is None


def test_chunked_digest_equals_the_whole_file_digest(tmp_path, monkeypatch):
    path = tmp_path / "blob"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 3 * 1000 + 17, dtype=np.uint8).tobytes())
    monkeypatch.setattr(checksums, "CHUNK", 1000)            # several chunks and a partial last one
    assert checksums.digest(path) == checksums.digest_reference(path)


def _array_files(wd: str, step: int) -> list[str]:
    step_dir = os.path.join(wd, "checkpoints", str(step))
    return [rel for rel in checksums.step_files(step_dir) if rel.startswith("state/") and "/d/" in rel]


def test_random_bytes_in_any_array_file_make_the_run_fall_back_with_one_warning(trained, tmp_path):
    files = _array_files(trained, 8)
    assert len(files) >= 3
    for k, rel in enumerate(files):
        wd = str(tmp_path / f"run{k}")
        shutil.copytree(trained, wd)
        _scribble(os.path.join(wd, "checkpoints", "8", rel), seed=k)
        lines = []
        ckpt = Checkpointer(os.path.join(wd, "checkpoints"), 3, 4)
        try:
            found = ckpt.restore_newest(lambda step: step, warn=lines.append)
        finally:
            ckpt.close()
        assert found == (4, 4), rel
        assert len(lines) == 1 and lines[0].startswith("warning: checkpoint step 8 in ")
        assert f"is damaged ({rel} does not match its checksum); using step 4" in lines[0]
        assert os.path.isdir(os.path.join(wd, "checkpoints.corrupt", "8"))


def test_a_resumed_run_passes_over_a_scribbled_step_and_trains_on(trained, tmp_path, capfd, tiny_config):
    wd = str(tmp_path / "run")
    shutil.copytree(trained, wd)
    for rel in _array_files(wd, 8)[:3]:
        _scribble(os.path.join(wd, "checkpoints", "8", rel), seed=1)
    capfd.readouterr()
    result = train_and_evaluate(tiny_config(**{"train.steps": 10}), wd)
    err = capfd.readouterr().err
    assert err.count("warning: checkpoint step 8 ") == 1 and "does not match its checksum" in err
    assert np.isfinite(result["val_loss"]) and result["steps"] == 10


def test_a_step_saved_without_checksums_loads_with_one_note(trained, tmp_path):
    wd = str(tmp_path / "old")
    shutil.copytree(trained, wd)
    os.remove(os.path.join(wd, "checkpoints", "8", checksums.FILE))
    lines = []
    ckpt = Checkpointer(os.path.join(wd, "checkpoints"), 3, 4)
    try:
        assert ckpt.restore_newest(lambda step: step, warn=lines.append) == (8, 8)
    finally:
        ckpt.close()
    assert lines == [f"note: checkpoint step 8 in {os.path.join(wd, 'checkpoints')} has no checksums (written by "
                     "an older edge_jax); loaded unverified"]


def test_a_missing_or_resized_file_is_named(trained, tmp_path):
    wd = str(tmp_path / "run")
    shutil.copytree(trained, wd)
    step_dir = os.path.join(wd, "checkpoints", "8")
    first, second = _array_files(wd, 8)[:2]
    with open(os.path.join(step_dir, first), "ab") as f:
        f.write(b"x")
    assert checksums.verify(step_dir) == f"{first} has {os.path.getsize(os.path.join(step_dir, first))} bytes, " \
                                         f"{os.path.getsize(os.path.join(step_dir, first)) - 1} were written"
    os.remove(os.path.join(step_dir, first))
    assert checksums.verify(step_dir) == f"{first} is missing"
    # a process's share of the files: the other share still checks out
    listed = sorted(json.load(open(os.path.join(step_dir, checksums.FILE)))["files"])
    i = listed.index(first)
    assert checksums.verify(step_dir, (1 - i % 2, 2)) is None and second


def test_each_checkpoint_keeps_its_loss_and_the_running_minimum(trained):
    ckpt = Checkpointer(os.path.join(trained, "checkpoints"), 3, 4)
    try:
        m4, m8 = ckpt.metrics(4), ckpt.metrics(8)
    finally:
        ckpt.close()
    assert 0 < m4["min_loss"] <= m4["loss"] and m8["min_loss"] <= min(m4["min_loss"], m8["loss"])


class _Saved:
    """A stand-in for a Checkpointer: its steps and their saved metrics."""

    def __init__(self, metrics):
        self._m = metrics

    def all_steps(self):
        return sorted(self._m)

    def metrics(self, step):
        return self._m[step]


def test_the_divergence_message_names_the_last_healthy_checkpoint():
    saved = _Saved({10: {"loss": 3.2, "min_loss": 3.0}, 20: {"loss": 355.0, "min_loss": 2.9},
                    30: {"loss": float("nan"), "min_loss": 2.9}})
    text = divergence.message(saved, "runs/a", 31, float("nan"), float("inf"), 3e-3)
    assert text.startswith("non-finite loss/grad norm (nan, inf) at step 31; the last healthy checkpoint is step 10 ")
    assert ("rerun the same command with --workdir runs/a-lr0.0015 --config.init_from=runs/a --config.init_step=10 "
            "--config.train.lr=0.0015") in text
    assert "\n" not in text
    none = divergence.message(_Saved({20: {"loss": 355.0, "min_loss": 2.9}}), "w", 21, 1.0, float("nan"), 1e-3)
    assert "no checkpoint with a healthy loss to go back to" in none and "--config.train.lr=0.0005" in none
    assert not divergence.healthy({})  # a step saved without its loss is not known to be healthy


def test_init_step_starts_a_new_run_from_that_checkpoint(trained, tmp_path, tiny_config):
    from edge_jax.config import ConfigError
    from edge_jax.train.init_from import restore_params
    p4, _ = restore_params(trained, 4)
    p8, _ = restore_params(trained, 8)
    leaves4, leaves8 = (np.concatenate([np.ravel(x) for x in __import__("jax").tree_util.tree_leaves(p)])
                        for p in (p4, p8))
    assert not np.array_equal(leaves4, leaves8)
    with pytest.raises(ConfigError, match=r"has no checkpoint at init_step=5; its steps: 4, 8"):
        restore_params(trained, 5)
    cfg = tiny_config(**{"train.steps": 3, "train.warmup_steps": 1, "init_from": trained, "init_step": 4})
    result = train_and_evaluate(cfg, str(tmp_path / "from4"))
    assert np.isfinite(result["val_loss"])
