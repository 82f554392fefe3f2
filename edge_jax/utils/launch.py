"""``edge-jax launch``: one multi-process job on this machine.

    edge-jax launch --processes 2 --devices-per-process 2 -- edge-jax train --config ... --workdir ...

starts N copies of the command with ``JAX_COORDINATOR_ADDRESS`` (a free local port),
``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` set (:mod:`edge_jax.distributed` reads them), each with
K devices: K simulated CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=K``), or on a
machine with NVIDIA GPUs the GPUs ``i*K .. i*K+K-1`` (``JAX_LOCAL_DEVICE_IDS``). Every output line is
prefixed with its process id. When a process fails, the others get a few seconds to stop by
themselves (a process that loses a peer says so in one line), then the rest are stopped (SIGTERM, then
SIGKILL after a grace period) and the launcher exits with the failed process's status (128 + s for a
process killed by signal s, as a shell reports it); when all succeed it exits 0. A SIGTERM to the
launcher is passed on to every process; a process that was preempted (exit 75,
:data:`edge_jax.errors.EXIT_PREEMPTED`: it saved a checkpoint) does not stop the others, which save
the same step, and the launcher then exits 75 too. ``edge-jax`` as the command runs this interpreter's
edge_jax (``python -m edge_jax.cli``).
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from edge_jax.distributed import COORDINATOR, NUM_PROCESSES, PROCESS_ID, nvidia_gpus
from edge_jax.errors import EXIT_PREEMPTED, ConfigError
from edge_jax.utils.args import count

GRACE_S = 5.0       # between SIGTERM and SIGKILL of the processes left when one failed
SETTLE_S = 3.0      # first, the others may stop by themselves (a lost peer: one line each, edge_jax.distributed)
POLL_S = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=count, required=True, metavar="N", help="processes to start")
    parser.add_argument("--devices-per-process", type=count, default=1, metavar="K",
                        help="devices of each process: simulated CPU devices, or GPUs where there are (default 1)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command every process runs")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(i: int, n: int, k: int, port: int, base: dict | None = None, gpus: bool = False) -> dict:
    """The environment of process ``i`` of ``n`` with ``k`` devices each."""
    env = dict(os.environ if base is None else base)
    env.update({COORDINATOR: f"127.0.0.1:{port}", NUM_PROCESSES: str(n), PROCESS_ID: str(i),
                "PYTHONUNBUFFERED": "1"})
    if gpus:
        env["JAX_LOCAL_DEVICE_IDS"] = ",".join(str(d) for d in range(i * k, (i + 1) * k))
    else:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
        env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={k}"])
    return env


def command_argv(command: list[str]) -> list[str]:
    """The argv to start: ``--`` dropped, ``edge-jax`` run with this interpreter."""
    command = command[1:] if command[:1] == ["--"] else list(command)
    if not command:
        raise ConfigError("edge-jax launch needs a command after --, e.g. edge-jax launch --processes 2 -- "
                          "edge-jax train --config configs/lm.py:size=tiny --workdir /tmp/run")
    if command[0] == "edge-jax":
        return [sys.executable, "-m", "edge_jax.cli", *command[1:]]
    return command


def _pump(i: int, stream, out, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            out.write(f"[{i}] {line.decode(errors='replace')}")
            out.flush()
    stream.close()


def launch(n: int, k: int, command: list[str], out=None) -> int:
    """Run ``command`` as ``n`` processes of one job (module docstring); the job's exit status."""
    if n < 1 or k < 1:
        raise ConfigError(f"--processes {n} and --devices-per-process {k} must be at least 1")
    out = out or sys.stdout
    argv, port, gpus = command_argv(command), free_port(), nvidia_gpus()
    lock = threading.Lock()
    procs, pumps = [], []
    for i in range(n):
        p = subprocess.Popen(argv, env=process_env(i, n, k, port, gpus=gpus), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        pumps.append(threading.Thread(target=_pump, args=(i, p.stdout, out, lock), daemon=True))
        pumps[-1].start()
    status = 0
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, lambda *_: _forward(procs, signal.SIGTERM)) if main_thread else None
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0, EXIT_PREEMPTED)]
            if failed:
                status = _stop_after(cause(failed), procs, out, lock)
                break
            if all(c is not None for c in codes):  # done; or preempted: each saved the same step
                status = EXIT_PREEMPTED if EXIT_PREEMPTED in codes else 0
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        _stop(procs)
        status = 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    for t in pumps:
        t.join(timeout=GRACE_S)
    return status


def cause(failed: list[tuple[int, int]]) -> tuple[int, int]:
    """Of the ``(process, status)`` failures seen in one poll, the one to report: a process killed by a signal
    or that crashed (status > 128) before one that exited with an error (a survivor naming its lost peer)."""
    return min(failed, key=lambda f: (0 < f[1] <= 128, f[0]))


def _stop_after(failed: tuple[int, int], procs, out, lock) -> int:
    i, code = failed
    deadline = time.monotonic() + SETTLE_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    running = [j for j, p in enumerate(procs) if p.poll() is None]
    _stop(procs)
    with lock:
        names = f"process{'es' if len(running) > 1 else ''} {', '.join(map(str, running))}"
        stopped = f"; stopped {names}" if running else ""
        out.write(f"edge-jax launch: {ended(i, code)}{stopped}\n")
        out.flush()
    return exit_status(code)


def exit_status(code: int) -> int:
    """A child's return code as the launcher's exit status: killed by signal s (``-s``) is 128 + s, as a shell
    reports it."""
    return code if code >= 0 else 128 - code


def ended(i: int, code: int) -> str:
    """How process ``i`` ended, in the status the launcher then exits with."""
    if code >= 0:
        return f"process {i} exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"process {i} was killed by {name} (exit {exit_status(code)})"


def _forward(procs, sig) -> None:
    """Send ``sig`` to every running process group (the launcher's own SIGTERM: each process saves and exits
    75, and the launcher exits 75 once all have)."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass


def _stop(procs) -> None:
    """SIGTERM every running process group, SIGKILL what is left after the grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in procs if p.poll() is None]
        for p in live:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + GRACE_S
        while any(p.poll() is None for p in live) and time.monotonic() < deadline:
            time.sleep(POLL_S)
