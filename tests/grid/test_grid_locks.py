"""Unit locks (edge_jax.grid.locks): a unit that another process runs is skipped, not trained twice;
the lock of a SIGKILLed holder is taken over. Real processes, fake training (fast)."""
import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import ml_collections
import pytest

from edge_jax.config import apply_overrides
from edge_jax.grid import command, locks, runner, spec

REPO = Path(__file__).resolve().parents[2]
ABLATION = '''
def get_grid(preset):
    return {
        "name": "locked", "title": "t", "base": "fake", "base_overrides": {"train.steps": 20},
        "cells": {"a": {}, "b": {"train.schedule": "wsd"}}, "metric": "val_loss", "lower_is_better": True,
        "extra_metrics": [], "paper": {"metric": "m", "values": {}, "higher_is_better": True, "source": "s"},
        "notes": "",
    }
'''
# A grid process whose training logs step 10, then waits for GATE/release before logging step 20.
RUN = '''
import argparse, json, os, sys, time
from pathlib import Path
from edge_jax.grid import command

sys.path.insert(0, "tests/grid")
from test_grid_locks import fake_load as load

gate = Path(sys.argv[1])

def train(config, workdir):
    with open(f"{workdir}/metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 10, "kind": "eval", "val_loss": 3.0, "pid": os.getpid()}) + "\\n")
    (gate / f"started.{os.getpid()}").write_text("")
    deadline = time.time() + 120
    while not (gate / "release").exists() and time.time() < deadline:
        time.sleep(0.02)
    with open(f"{workdir}/metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 20, "kind": "eval", "val_loss": 2.5, "pid": os.getpid()}) + "\\n")
    return {"val_loss": 2.5}

parser = argparse.ArgumentParser()
command.add_arguments(parser)
sys.exit(command.run(parser.parse_args(sys.argv[2:]), train_fn=train, load_config=load))
'''


def fake_load(base, overrides):
    return apply_overrides(ml_collections.ConfigDict({"seed": 0, "train": {"steps": 10, "schedule": "cosine"}}),
                           overrides)


class Train:
    def __init__(self, lock: Path | None = None):
        self.calls, self.lock, self.holders = [], lock, []

    def __call__(self, config, workdir):
        self.calls.append((config.train.schedule, config.seed))
        if self.lock is not None:
            self.holders.append(locks.holder(self.lock))
        with open(f"{workdir}/metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": 20, "kind": "eval", "val_loss": 2.0}) + "\n")
        return {"val_loss": 2.0}


@pytest.fixture
def grid_file(tmp_path):
    path = tmp_path / "locked.py"
    path.write_text(textwrap.dedent(ABLATION))
    return path


def cli(argv, train):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    logs = []
    rc = command.run(parser.parse_args([str(a) for a in argv]), train_fn=train, load_config=fake_load,
                     log=logs.append)
    return rc, logs


def start_holder(tmp_path, grid_file, out, *args, run: str = RUN, env: dict | None = None
                 ) -> tuple[subprocess.Popen, Path]:
    """A real grid process (the script ``run``) on unit 0, stopped inside its training until ``gate/release``
    exists; ``env``: added to its environment."""
    script, gate = tmp_path / "run_grid.py", tmp_path / "gate"
    script.write_text(run)
    gate.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, str(script), str(gate), str(grid_file), "--out", str(out),
                             "--seeds", "1", "--cell", "0", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ, **(env or {})))
    deadline = time.time() + 120
    while not list(gate.glob(f"started.{proc.pid}")):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"the holder did not start training: {proc.communicate()[0][-2000:]}")
        time.sleep(0.02)
    return proc, gate


def test_try_locked_names_the_holder_and_frees_on_exit(tmp_path):
    path = tmp_path / "runs" / "a" / "seed0.lock"
    with locks.try_locked(path, command="edge-jax grid x") as busy:
        assert busy is None
        note = locks.holder(path)
        assert (note["pid"], note["host"], note["command"]) == (os.getpid(), socket.gethostname(), "edge-jax grid x")
        assert note["since"].endswith("Z")
        with locks.try_locked(path) as other:   # another open file: flock tells them apart, in one process too
            assert other == note
        assert locks.who(note) == f"pid {os.getpid()} on host {socket.gethostname()} since {note['since']}"
    assert path.read_text() == "" and locks.holder(path) == {} and locks.who({}) == "another process"
    with locks.try_locked(path) as busy:
        assert busy is None


@pytest.mark.subprocess
def test_a_second_process_skips_the_unit_and_exactly_one_trains(tmp_path, grid_file):
    out = tmp_path / "out"
    holder, gate = start_holder(tmp_path, grid_file, out)
    try:
        second = subprocess.run([sys.executable, str(tmp_path / "run_grid.py"), str(gate), str(grid_file),
                                 "--out", str(out), "--seeds", "1", "--cell", "0"], cwd=REPO,
                                capture_output=True, text=True, timeout=300)
    finally:
        (gate / "release").write_text("")
        first = holder.communicate(timeout=300)[0]
    assert second.returncode == 0, second.stdout + second.stderr
    lock = out / "runs" / "a" / "seed0.lock"
    assert f"a seed 0: being run by pid {holder.pid} on host {socket.gethostname()} since " in second.stdout
    assert f"(lock {lock}); skipped" in second.stdout
    assert "locked: 0 ran, 0 reused, 0 skipped, 1 held by other processes, 0 failed" in second.stdout
    assert holder.returncode == 0, first
    assert [p.name for p in gate.glob("started.*")] == [f"started.{holder.pid}"]   # one trained
    lines = (out / "runs" / "a" / "seed0" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [10, 20]                      # each line once
    assert {json.loads(x)["pid"] for x in lines} == {holder.pid}
    record = json.loads((out / "records" / "a__seed0.json").read_text())
    assert record["resumed"] is False and record["metrics"]["val_loss"] == 2.5
    assert lock.read_text() == ""                                                  # let go


@pytest.mark.subprocess
def test_a_sigkilled_holders_lock_is_taken_over(tmp_path, grid_file):
    out = tmp_path / "out"
    lock = out / "runs" / "a" / "seed0.lock"
    holder, _ = start_holder(tmp_path, grid_file, out)
    try:
        train = Train(lock)
        rc, logs = cli([grid_file, "--out", out, "--seeds", 1], train)
        assert rc == 0 and train.calls == [("wsd", 0)]          # unit a is held, unit b ran
        assert any(line.startswith("[1/2] a seed 0: being run by pid " + str(holder.pid)) for line in logs)
        assert "locked: 1 ran, 0 reused, 0 skipped, 1 held by other processes, 0 failed" in logs
        assert not (out / "records" / "a__seed0.json").exists()
    finally:
        holder.kill()                                           # SIGKILL: no cleanup of any kind
        holder.wait(timeout=60)
    assert holder.returncode == -9 and locks.holder(lock)["pid"] == holder.pid   # its note is left behind
    train = Train(lock)
    rc, logs = cli([grid_file, "--out", out, "--seeds", 1], train)
    assert rc == 0 and train.calls == [("cosine", 0)]
    assert train.holders[0]["pid"] == os.getpid()            # the lock was taken over, and says so
    record = json.loads((out / "records" / "a__seed0.json").read_text())
    assert record["resumed"] is True                         # the killed run's workdir is resumed
    assert lock.read_text() == ""


def test_a_record_written_before_the_lock_was_taken_is_not_run_again(tmp_path, grid_file, monkeypatch):
    """The other process finished the unit between this one's record check and its lock."""
    out = tmp_path / "out"
    taken = locks.try_locked

    def finished_meanwhile(path, command=None):
        record = out / "records" / "a__seed0.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"grid": "locked", "preset": "tiny", "cell": "a", "seed": 0,
                                      "metrics": {"val_loss": 1.0}}))
        return taken(path, command)

    monkeypatch.setattr(locks, "try_locked", finished_meanwhile)
    train = Train()
    rc, logs = cli([grid_file, "--out", out, "--seeds", 1, "--cell", 0], train)
    assert rc == 0 and train.calls == []
    assert any("a seed 0: skipped, record exists" in line and "meanwhile" in line for line in logs)
    assert "locked: 0 ran, 0 reused, 1 skipped, 0 held by other processes, 0 failed" in logs


def test_run_grid_counts_held_units_apart(tmp_path, grid_file):
    grid = spec.load_grid(grid_file)
    out = tmp_path / "out"
    units = runner.plan(grid, 2)
    with locks.try_locked(runner.lock_path(out, units[3])):
        summary = runner.run_grid(grid, out, units, train_fn=Train(), load_config=fake_load, log=lambda m: None)
    assert summary.held == [units[3]] and summary.ran == units[:3] and not summary.failed
    assert not runner.workdir(out, units[3]).exists()        # the holder's unit is not touched


def test_a_stage_lock_waits_for_its_holder_and_names_it(tmp_path):
    path = tmp_path / "seed0.lock"
    logs, entered = [], threading.Event()

    def waiter():
        with locks.locked(path, logs.append, what="stage base seed 0"):
            entered.set()

    with locks.try_locked(path):
        thread = threading.Thread(target=waiter)
        thread.start()
        assert not entered.wait(0.5)                          # it waits, it does not skip
    thread.join(timeout=30)
    assert entered.is_set()
    assert len(logs) == 1 and logs[0].startswith(f"stage base seed 0: waiting for pid {os.getpid()} on host ")
    assert logs[0].endswith(f"who holds {path}") and path.read_text() == ""



def test_a_preempted_unit_stays_unfinished_and_stops_the_grid(tmp_path, grid_file):
    """SIGTERM inside a unit (Preempted from its run): no record, no later unit, the lock let go."""
    from edge_jax.errors import Preempted
    ran = []

    def preempted(config, workdir):
        ran.append(workdir)
        raise Preempted("stopped by SIGTERM after step 3 of 10")

    out = tmp_path / "out"
    with pytest.raises(Preempted):
        cli([grid_file, "--out", out, "--seeds", "2", "--allow-dirty"], preempted)
    assert len(ran) == 1 and not list((out / "records").glob("*.json"))
    assert (out / "runs" / "a" / "seed0.lock").read_text() == ""        # let go: the rerun takes it
