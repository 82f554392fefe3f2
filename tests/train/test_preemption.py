"""SIGTERM (a preemption, a time limit) saves a checkpoint at the next step and exits 75 (Ctrl-C: 130); rerunning
resumes exactly."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_overrides

from edge_jax.errors import EXIT_INTERRUPTED, EXIT_PREEMPTED
from edge_jax.train.metrics import read_jsonl

STEPS = 30
EXTRA = {"train.steps": STEPS, "train.ckpt_every": 1000, "train.eval_every": 1000}


def _losses(workdir):
    return {r["step"]: r["loss"] for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r["kind"] == "train"}


def _argv(workdir):
    flags = [f"--config.{k}={v}" for k, v in tiny_overrides(**EXTRA).items()]
    return [sys.executable, "-m", "edge_jax.cli", "train", "--config", "configs/lm.py:size=tiny",
            "--workdir", workdir, *flags]


@pytest.mark.subprocess
def test_sigterm_saves_the_next_step_and_a_rerun_resumes_with_equal_losses(tiny_config, tmp_path):
    from edge_jax.train.loop import train_and_evaluate
    whole = str(tmp_path / "whole")
    train_and_evaluate(tiny_config(**EXTRA), whole)
    wd = str(tmp_path / "cut")
    proc = subprocess.Popen(_argv(wd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(_losses(wd) if os.path.exists(os.path.join(wd, "metrics.jsonl")) else {}) < 5:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    line = [x for x in err.splitlines() if x.startswith("edge-jax: preempted: ")]
    assert len(line) == 1 and "Traceback" not in err
    cut = max(_losses(wd))
    assert f"stopped by SIGTERM after step {cut} of {STEPS}; its checkpoint is in " in line[0]
    assert cut < STEPS and sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints"))) == [cut]
    assert not os.path.exists(os.path.join(wd, "final_metrics.json"))
    # the rerun (in this process: the signal was the other one's) recomputes no step: it starts at cut + 1,
    # and every loss equals the uninterrupted run's
    assert train_and_evaluate(tiny_config(**EXTRA), wd)["steps"] == STEPS
    assert _losses(wd) == _losses(whole)


@pytest.mark.slow  # two runs in subprocesses: about 30 s, over a minute on a busy machine
@pytest.mark.subprocess
def test_ctrl_c_saves_the_next_step_exits_130_in_one_line_and_a_rerun_resumes(tmp_path):
    wd = str(tmp_path / "cut")
    proc = subprocess.Popen(_argv(wd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (_losses(wd) if os.path.exists(os.path.join(wd, "metrics.jsonl")) else {}):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in err, err[-2000:]
    lines = [x for x in err.splitlines() if x.startswith("edge-jax: ")]
    cut = max(_losses(wd))
    assert lines == [f"edge-jax: interrupted: stopped by Ctrl-C after step {cut} of {STEPS}; its checkpoint is in "
                     f"{os.path.join(wd, 'checkpoints')}: rerun the same command to resume"], err[-2000:]
    assert cut < STEPS and sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints"))) == [cut]
    # the rerun starts at step cut + 1 (its progress bar opens at cut) and finishes
    done = subprocess.run(_argv(wd), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f" {cut}/{STEPS} [" in done.stderr and f" 0/{STEPS} [" not in done.stderr
    assert sorted(_losses(wd)) == list(range(1, STEPS + 1))


SECOND_CTRL_C = """
import os, signal, time
# a terminal's process: SIGINT delivered and raising KeyboardInterrupt (a test worker's children inherit its
# signal mask and ignored signals; CI's worker had SIGINT blocked by then)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
from edge_jax.train.preemption import PreemptionWatch
before = signal.getsignal(signal.SIGINT)
with PreemptionWatch() as watch:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.1)
    assert watch.reached(1) and watch.interrupted
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        raise SystemExit("the second Ctrl-C did not interrupt")
    except KeyboardInterrupt:
        pass
assert signal.getsignal(signal.SIGINT) is before
print("ok")
"""


def test_a_second_ctrl_c_interrupts_at_once():
    """In a fresh interpreter with SIGINT as a terminal gives it: in CI the test worker's SIGINT was blocked by
    the time this test ran (its first SIGINT's handler never ran, even after 10 s)."""
    run = subprocess.run([sys.executable, "-c", SECOND_CTRL_C], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


@pytest.mark.parametrize("signalled", [False, True])
def test_the_watch_reports_a_signal_only_while_open(signalled):
    from edge_jax.train.preemption import PreemptionWatch
    before = signal.getsignal(signal.SIGTERM)
    with PreemptionWatch() as watch:
        assert not watch.reached(1)
        if signalled:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        assert watch.reached(2) is signalled
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.subprocess
def test_a_sigkill_during_async_saves_leaves_only_intact_steps(tiny_config, tmp_path):
    """With a save started every step, the kill lands while one is being written: what is left under a
    step's name verifies, and the run resumes from it."""
    from edge_jax.train import checksums
    from edge_jax.train.loop import train_and_evaluate
    wd = str(tmp_path / "killed")
    argv = _argv(wd) + ["--config.train.ckpt_every=1", "--config.train.keep_ckpts=100"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(_losses(wd) if os.path.exists(os.path.join(wd, "metrics.jsonl")) else {}) < 6:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=60)
    steps = sorted(int(d) for d in os.listdir(os.path.join(wd, "checkpoints")) if d.isdigit())
    assert steps
    for step in steps:
        assert checksums.verify(os.path.join(wd, "checkpoints", str(step))) is None, step
    result = train_and_evaluate(tiny_config(**{**EXTRA, "train.ckpt_every": 1, "train.keep_ckpts": 100}), wd)
    assert result["steps"] == STEPS and os.path.isdir(os.path.join(wd, "checkpoints", str(STEPS)))
