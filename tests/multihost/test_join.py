"""Starting a job of several processes with explicit settings, when it cannot start: peers that never come,
a coordinator that never comes, two processes with one id; and a process lost once the job runs.

Each process is started directly (not through `edge-jax launch`, which would stop the others), so what
every process prints and its exit status are its own. The start-up faults run `edge-jax eval` of a
directory that is not a workdir: it joins the job before it looks at the directory, so a job that does
start ends at once with exit 2 too; the join timeout is 5 s.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import compile_flags

pytestmark = [pytest.mark.subprocess, pytest.mark.multihost]

ROOT = Path(__file__).resolve().parents[2]
JOIN_S = 5
CRASH = ("Check failure", "Traceback", "terminate called", "*** ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_FLAGS"))}
    return {**base, "PYTHONUNBUFFERED": "1", "EDGE_JAX_JOIN_TIMEOUT_S": str(JOIN_S), **extra}


def start(ids: list[int], n: int, command: list[str], port: int, **extra) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-m", "edge_jax.cli", *command, "--coordinator-address",
                              f"127.0.0.1:{port}", "--num-processes", str(n), "--process-id", str(i)],
                             cwd=ROOT, env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in ids]


def finish(procs, timeout=120) -> list[tuple[int, str]]:
    """``(exit status, stderr)`` of each process."""
    errs = [p.communicate(timeout=timeout)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs)]


def own_lines(err: str) -> list[str]:
    """edge-jax's own lines on stderr (JAX's start-up log lines aside)."""
    return [line for line in err.splitlines() if line.startswith("edge-jax")]


def check_refused(results, n: int, port: int, says: str) -> None:
    for code, err in results:
        assert code == 2, err
        assert not any(c in err for c in CRASH), err
        lines = own_lines(err)
        assert re.fullmatch(rf"edge-jax: process \d of {n} joins the job at 127\.0\.0\.1:{port}; waiting up to "
                            rf"{JOIN_S} s for the other .*\(--join-timeout\)", lines[0]), lines
        assert len(lines) == 2 and lines[1].startswith("edge-jax: error: ") and says in lines[1], err


@pytest.mark.slow   # 16-29 s on a busy 2-core machine
def test_peers_that_never_come_are_named_after_the_join_timeout(tmp_path):
    port, t0 = free_port(), time.monotonic()
    results = finish(start([0, 1], 3, ["eval", "--workdir", str(tmp_path)], port))
    check_refused(results, 3, port, f"process 2 of 3 did not join the job at 127.0.0.1:{port} within 5 s: start it "
                                    "(the same command with --process-id 2)")
    assert time.monotonic() - t0 < 60


def test_a_coordinator_that_never_comes_is_named(tmp_path):
    port = free_port()
    results = finish(start([1], 2, ["eval", "--workdir", str(tmp_path)], port))
    check_refused(results, 2, port, f"process 0 (the coordinator) did not answer at 127.0.0.1:{port} within 5 s")


@pytest.mark.slow   # 16-29 s on a busy 2-core machine
def test_two_processes_with_one_id_stop_every_process_naming_it(tmp_path):
    port = free_port()
    results = finish(start([0, 1, 1], 3, ["eval", "--workdir", str(tmp_path)], port))
    check_refused(results, 3, port, "two processes were started with --process-id 1; give each process its own id")


@pytest.mark.slow   # 16-29 s on a busy 2-core machine
def test_two_processes_with_id_0_on_one_host(tmp_path):
    port = free_port()
    first = start([0], 2, ["eval", "--workdir", str(tmp_path)], port)
    time.sleep(0.5)
    second = start([0], 2, ["eval", "--workdir", str(tmp_path)], port)
    (code, err), = finish(second)
    assert code == 2 and not any(c in err for c in CRASH), err
    assert f"process 0 cannot listen on port {port} (Address already in use): another process already has " \
           "--process-id 0 on this host" in own_lines(err)[-1]
    finish(first)


TRAIN = ["train", "--config", "configs/lm.py:size=tiny", "--config.train.schedule=constant",
         "--config.train.warmup_steps=2", "--config.train.eval_every=1000", "--config.train.ckpt_every=4",
         "--config.train.log_every=1", "--config.data.seq_len=64", "--config.data.batch_size=8",
         "--config.train.steps=5000"]


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_a_lost_process_stops_the_survivor_with_one_line(tmp_path, victim):
    """SIGKILL one process of a training job once a checkpoint is saved: the other names it and the last
    checkpoint in one line and exits 2 at once (no crash dump, no wait for JAX's heartbeats)."""
    workdir, port = tmp_path / "run", free_port()
    data = os.environ.get("EDGE_JAX_TEST_DATA") or str(tmp_path / "data")
    procs = start([0, 1], 2, [*TRAIN, "--workdir", str(workdir)], port, EDGE_JAX_JOIN_TIMEOUT_S="60",
                  EDGE_JAX_DATA=data, XLA_FLAGS=f"--xla_force_host_platform_device_count=2 {compile_flags()}")
    deadline = time.monotonic() + 400
    while not (workdir / "checkpoints" / "4").is_dir():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.2)
    procs[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    survivor = procs[1 - victim]
    code, err = survivor.wait(timeout=60), survivor.communicate()[1]
    took = time.monotonic() - killed_at
    procs[victim].communicate()
    lines = own_lines(err)
    assert code == 2, err[-3000:]
    assert lines[-1].startswith(f"edge-jax: error: process {victim} of the job was lost (killed, or its host went "
                                f"away); stopping process {1 - victim}; the last checkpoint in {workdir} is step "), \
        lines
    assert lines[-1].endswith(": rerun the same command on every process to resume from it"), lines
    assert took < 10, took
    if victim == 1:   # process 0 holds JAX's coordination service: nothing of JAX's notices first
        assert not any(c in err for c in CRASH) and "client.h" not in err, err[-3000:]
    else:             # JAX's client in process 1 sees the service go at the same moment (docs/multihost.md)
        assert "Check failure stack trace" not in err, err[-3000:]
