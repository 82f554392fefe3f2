"""A disk that fills during a checkpoint save: one line naming the directory and the last intact step, exit 2,
the earlier steps intact and the partial one not left looking like a saved step."""
import errno
import os
import subprocess
import sys

import pytest
from conftest import tiny_overrides
from etils import epath

from edge_jax.train import checksums
from edge_jax.train.checkpoint import Checkpointer, disk_full


def _argv(workdir: str) -> list[str]:
    flags = [f"--config.{k}={v}" for k, v in tiny_overrides(**{"train.steps": 12, "train.eval_every": 100}).items()]
    return ["train", "--config", "configs/lm.py:size=tiny", "--workdir", workdir, *flags]


@pytest.mark.subprocess  # the resume runs in a process of its own
def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_earlier_steps(tmp_path, monkeypatch, capfd):
    from edge_jax.cli import main
    monkeypatch.setenv("EDGE_JAX_DATA", os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data")))
    wd = str(tmp_path / "run")
    # the lowest write orbax makes from Python: the JSON items (data-iterator state, health) of a step, here
    # step 12's, in orbax's background commit thread as on a real full disk
    path_class = type(epath.Path(str(tmp_path)))
    write_text = path_class.write_text

    def full(self, *args, **kwargs):
        if f"{os.sep}12.orbax-checkpoint-tmp" in str(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(path_class, "write_text", full)
    capfd.readouterr()
    code = main(_argv(wd))
    out, err = capfd.readouterr()
    monkeypatch.undo()
    ckpt_dir = os.path.join(wd, "checkpoints")
    assert code == 2, err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("edge-jax: error: ")]
    assert lines == [f"edge-jax: error: no space left on device saving a checkpoint in {ckpt_dir}; its last intact "
                     "step is 8, kept: free space and rerun the same command to resume"], err[-3000:]
    steps = sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())
    assert steps == [4, 8]
    assert all(checksums.verify(os.path.join(ckpt_dir, str(s))) is None for s in steps)
    ckpt = Checkpointer(ckpt_dir, 3, 4)
    try:
        assert ckpt.restore_newest(lambda step: ckpt.metrics(step)["loss"], warn=print)[0] == 8
    finally:
        ckpt.close()
    # space freed: the same command resumes from step 8 and finishes (in a process of its own: this one still
    # holds the abandoned writes of step 12, which fail once the restart removes their temporary directory)
    done = subprocess.run([sys.executable, "-m", "edge_jax.cli", *_argv(wd)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())[-1] == 12


def test_a_full_disk_is_found_inside_what_wraps_it():
    enospc = OSError(errno.ENOSPC, "No space left on device")
    wrapped = RuntimeError("save failed")
    wrapped.__cause__ = enospc
    group = Exception("commit")  # an exception group's shape (ExceptionGroup is Python 3.11+)
    group.exceptions = (ValueError("x"), wrapped)
    assert disk_full(wrapped) and disk_full(group)
    assert disk_full(ValueError("RESOURCE_EXHAUSTED: ... No space left on device [os_error_code='28']"))
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not disk_full(OSError(errno.EACCES, "Permission denied")) and not disk_full(ValueError("x"))
