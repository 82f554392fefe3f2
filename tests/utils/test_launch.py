"""edge-jax launch: environments, the command line, and a failing process ending the job (no JAX)."""
import sys
import time

import pytest

from edge_jax.cli import main
from edge_jax.utils import launch


def test_each_process_gets_the_job_settings_and_its_devices():
    env = launch.process_env(1, 2, 3, 4567, base={"XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8"})
    job = (env["JAX_COORDINATOR_ADDRESS"], env["JAX_NUM_PROCESSES"], env["JAX_PROCESS_ID"])
    assert job == ("127.0.0.1:4567", "2", "1")
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
    gpu = launch.process_env(1, 2, 3, 4567, base={}, gpus=True)
    assert gpu["JAX_LOCAL_DEVICE_IDS"] == "3,4,5" and "XLA_FLAGS" not in gpu


def test_edge_jax_runs_with_this_interpreter():
    assert launch.command_argv(["--", "edge-jax", "train"]) == [sys.executable, "-m", "edge_jax.cli", "train"]
    assert launch.command_argv(["python", "x.py"]) == ["python", "x.py"]


@pytest.mark.subprocess
def test_a_failing_process_stops_the_others_within_seconds(capsys):
    code = ("import os, sys, time\n"
            "i = int(os.environ['JAX_PROCESS_ID'])\n"
            "print('hello from', i, os.environ['JAX_NUM_PROCESSES'], flush=True)\n"
            "time.sleep(0.5) if i == 1 else time.sleep(600)\n"
            "sys.exit(3)")
    t0 = time.monotonic()
    assert main(["launch", "--processes", "3", "--", sys.executable, "-c", code]) == 3
    assert time.monotonic() - t0 < 20
    out = capsys.readouterr().out
    assert "[1] hello from 1 3" in out and "[0] hello from 0 3" in out
    assert "edge-jax launch: process 1 exited with status 3; stopped processes 0, 2" in out


@pytest.mark.subprocess
def test_all_succeed_is_status_0_and_a_missing_command_is_one_line(capsys):
    assert main(["launch", "--processes", "2", "--", sys.executable, "-c", "print('ok')"]) == 0
    assert main(["launch", "--processes", "2"]) == 2
    assert "needs a command after --" in capsys.readouterr().err


@pytest.mark.subprocess
def test_sigterm_to_the_launcher_reaches_every_process_and_a_preempted_job_exits_75(tmp_path):
    """Each process saves on SIGTERM and exits 75 (here: a script that says so, at different times): none is
    stopped early, and the launcher exits 75."""
    import os
    import signal
    import subprocess
    script = tmp_path / "saves.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5 * int(os.environ['JAX_PROCESS_ID'])),\n"
        "                                          print('saved', flush=True), sys.exit(75)))\n"
        f"open(os.path.join({str(tmp_path)!r}, 'up.' + os.environ['JAX_PROCESS_ID']), 'w').close()\n"
        "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-m", "edge_jax.cli", "launch", "--processes", "2", "--",
                             sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not all(os.path.exists(tmp_path / f"up.{i}") for i in (0, 1)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 75, out
    assert "[0] saved" in out and "[1] saved" in out and "stopped process" not in out


@pytest.mark.subprocess
def test_a_process_killed_by_a_signal_is_named_with_the_status_the_launcher_exits_with(capsys):
    code = ("import os, signal, time\n"
            "time.sleep(0.3)\n"
            "os.kill(os.getpid(), signal.SIGKILL) if os.environ['JAX_PROCESS_ID'] == '1' else time.sleep(600)")
    assert main(["launch", "--processes", "2", "--", sys.executable, "-c", code]) == 137
    out = capsys.readouterr().out
    assert "edge-jax launch: process 1 was killed by SIGKILL (exit 137); stopped process 0" in out
    assert launch.ended(0, -15) == "process 0 was killed by SIGTERM (exit 143)" and launch.exit_status(-15) == 143
    assert launch.ended(2, 3) == "process 2 exited with status 3" and launch.exit_status(3) == 3


def test_seen_together_the_killed_process_is_reported_not_the_one_that_lost_it():
    assert launch.cause([(0, 2), (1, -9)]) == (1, -9)
    assert launch.cause([(0, 2), (1, 134)]) == (1, 134)
    assert launch.cause([(0, 3), (2, 2)]) == (0, 3)
