"""A grid whose outputs are in a bucket (``--out gs://...``), against a local Cloud Storage server (tests/gcs.py):
the unit locks are objects under a lease (edge_jax.utils.object_lock); two processes on one bucket write one
record per unit; a SIGKILLed holder's lock is taken over once its lease runs out. Fake training (fast)."""
import json
import os
import socket
import textwrap
import threading
import time

import pytest
from helpers import needs_extra
from test_grid_locks import ABLATION, cli, start_holder

pytestmark = needs_extra("gcsfs")

# A grid process whose training (in the bucket) logs step 10, then waits for GATE/release before step 20.
RUN = '''
import argparse, json, os, sys, time
from pathlib import Path
from edge_jax.grid import command
from edge_jax.utils.storage import epath

sys.path.insert(0, "tests/grid")
from test_grid_locks import fake_load as load

gate = Path(sys.argv[1])

def log(workdir, step):
    path = epath(f"{workdir}/metrics.jsonl")
    old = path.read_text() if path.exists() else ""
    path.write_text(old + json.dumps({"step": step, "kind": "eval", "val_loss": 3.0 - step / 20,
                                      "pid": os.getpid()}) + "\\n")

def train(config, workdir):
    log(workdir, 10)
    (gate / f"started.{os.getpid()}").write_text("")
    deadline = time.time() + 120
    while not (gate / "release").exists() and time.time() < deadline:
        time.sleep(0.02)
    log(workdir, 20)
    return {"val_loss": 2.0}

parser = argparse.ArgumentParser()
command.add_arguments(parser)
sys.exit(command.run(parser.parse_args(sys.argv[2:]), train_fn=train, load_config=load))
'''


@pytest.fixture(scope="module")
def bucket():
    from gcs import emulator
    with emulator() as root:
        yield root


@pytest.fixture
def grid_file(tmp_path):
    path = tmp_path / "locked.py"
    path.write_text(textwrap.dedent(ABLATION))
    return path


class BucketTrain:
    """The in-process training of the tests: one eval line in the bucket workdir."""

    def __init__(self):
        self.calls = []

    def __call__(self, config, workdir):
        from edge_jax.utils.storage import epath
        self.calls.append((config.train.schedule, config.seed))
        epath(f"{workdir}/metrics.jsonl").write_text(json.dumps({"step": 20, "kind": "eval", "val_loss": 2.0}) + "\n")
        return {"val_loss": 2.0}


def _objects(prefix: str) -> dict:
    from edge_jax.utils.storage import files_under
    return files_under(prefix)


def test_exactly_one_of_racing_takers_holds_an_object_lock_and_others_see_its_note(bucket):
    from edge_jax.utils.object_lock import ObjectLock, holder
    where = f"{bucket}/locks/race.lock"
    locks = [ObjectLock(where, {"pid": i, "host": "h"}, lease=30) for i in range(8)]
    answers = [None] * 8
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, locks[i].try_take())) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, a in enumerate(answers) if a is None]
    assert len(winners) == 1, answers
    assert {a["pid"] for a in answers if a is not None} == {winners[0]}
    assert holder(where)["pid"] == winners[0] and holder(where)["expires"] > time.time()
    locks[winners[0]].release()
    assert holder(where) == {} and not _objects(f"{bucket}/locks")
    assert locks[3].try_take() is None  # free again
    locks[3].release()


def test_a_renewed_lease_holds_and_a_dead_holders_lapses(bucket):
    from edge_jax.utils.object_lock import ObjectLock, holder
    where = f"{bucket}/locks/lease.lock"
    alive = ObjectLock(where, {"pid": 1}, lease=1.0)
    assert alive.try_take() is None
    time.sleep(2.5)  # more than two leases: renewed every quarter lease, so still held
    assert ObjectLock(where, {"pid": 2}, lease=1.0).try_take() == holder(where) and holder(where)["pid"] == 1
    alive._stop.set()  # dies: stops renewing, never lets go
    alive._renewer.join()
    time.sleep(1.2)
    taker = ObjectLock(where, {"pid": 3}, lease=30)
    assert taker.try_take() is None and holder(where)["pid"] == 3
    alive.release()  # the dead holder's release deletes only its own generation: the new lock stays
    assert holder(where)["pid"] == 3
    taker.release()
    assert holder(where) == {}


@pytest.mark.subprocess
def test_two_processes_on_one_bucket_write_one_record_per_unit(bucket, tmp_path, grid_file):
    out = f"{bucket}/two/out"  # parents of their own: a sibling grid output would be reused
    holder, gate = start_holder(tmp_path, grid_file, out, run=RUN)
    try:
        train = BucketTrain()
        rc, logs = cli([grid_file, "--out", out, "--seeds", 1], train)
    finally:
        (gate / "release").write_text("")
        first = holder.communicate(timeout=300)[0]
    assert rc == 0 and train.calls == [("wsd", 0)], logs  # unit a held by the other process, unit b ran here
    lock = f"{out}/runs/a/seed0.lock"
    held = [line for line in logs if line.startswith("[1/2] a seed 0: being run by ")]
    assert held and f"pid {holder.pid} on host {socket.gethostname()} since " in held[0], logs
    assert held[0].endswith(f"(lock {lock}); skipped")
    assert "locked: 1 ran, 0 reused, 0 skipped, 1 held by other processes, 0 failed" in logs
    assert holder.returncode == 0, first
    files = _objects(out)
    assert sorted(f for f in files if f.startswith("records/")) == ["records/a__seed0.json", "records/b__seed0.json"]
    assert not [f for f in files if f.endswith(".lock")]  # both let go
    from edge_jax.utils.storage import epath
    lines = epath(f"{out}/runs/a/seed0/metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [10, 20] and {json.loads(x)["pid"] for x in lines} == {holder.pid}
    assert json.loads(epath(f"{out}/records/a__seed0.json").read_text())["metrics"]["val_loss"] == 2.0
    rc, logs = cli([grid_file, "--out", out, "--seeds", 1, "--tables-only"], BucketTrain())
    assert rc == 0 and "| a |" in epath(f"{out}/table.md").read_text(), logs


@pytest.mark.subprocess
def test_a_sigkilled_holders_object_lock_is_taken_over_after_its_lease(bucket, tmp_path, grid_file):
    from edge_jax.grid import locks
    out = f"{bucket}/killed/out"
    lock = f"{out}/runs/a/seed0.lock"
    holder, _ = start_holder(tmp_path, grid_file, out, run=RUN, env={"EDGE_JAX_LOCK_LEASE_S": "2"})
    holder.kill()  # SIGKILL: no release of any kind
    holder.wait(timeout=60)
    note = locks.holder(lock)
    assert holder.returncode == -9 and note["pid"] == holder.pid  # its lock object is left behind
    time.sleep(max(0.0, note["expires"] - time.time()) + 0.5)
    train = BucketTrain()
    rc, logs = cli([grid_file, "--out", out, "--seeds", 1], train)
    assert rc == 0 and sorted(train.calls) == [("cosine", 0), ("wsd", 0)], logs
    from edge_jax.utils.storage import epath
    record = json.loads(epath(f"{out}/records/a__seed0.json").read_text())
    assert record["resumed"] is True  # the killed run's workdir (its step-10 line) is resumed
    assert not [f for f in _objects(out) if f.endswith(".lock")]


def test_a_stage_lock_in_a_bucket_waits_for_its_holder_and_names_it(bucket):
    from edge_jax.grid import locks
    from edge_jax.utils.object_lock import ObjectLock, holder
    where = f"{bucket}/stages/s-1/seed0.lock"
    other = ObjectLock(where, {"pid": 4242, "host": "h1", "since": "2026-11-28T00:00:00Z"}, lease=30)
    assert other.try_take() is None
    threading.Timer(1.0, other.release).start()
    logs, t0 = [], time.monotonic()
    with locks.locked(where, logs.append, what="stage s seed 0", command="edge-jax grid g"):
        assert holder(where)["command"] == "edge-jax grid g"
    assert time.monotonic() - t0 >= 1.0
    assert logs == [f"stage s seed 0: waiting for pid 4242 on host h1 since 2026-11-28T00:00:00Z, who holds {where}"]
    assert holder(where) == {}


def test_a_post_hook_writes_into_the_bucket_through_a_local_directory(bucket, tmp_path):
    """Hooks write files with pathlib; with --out gs://... they write into a local directory, uploaded after."""
    grid_file = tmp_path / "posted.py"
    grid_file.write_text(textwrap.dedent(ABLATION).replace('"notes": "",', '"notes": "", '
                                                           '"post": "test_grid_post:writes_report",'))
    out = f"{bucket}/posted/out"
    rc, logs = cli([grid_file, "--out", out, "--seeds", 1], BucketTrain())
    from edge_jax.utils.storage import epath
    assert rc == 0 and epath(f"{out}/report.md").read_text() == "2 records\n", logs
    assert f"test_grid_post:writes_report: wrote {out}/report.md" in logs
    assert not os.path.exists("gs:") and not (tmp_path / "gs:").exists()  # nothing folded into a local gs:/ path


def test_shared_stages_in_a_bucket_train_once_and_resolve_to_bucket_workdirs(bucket):
    from test_grid_stages import _load, staged_grid

    from edge_jax.grid import runner
    from edge_jax.utils.storage import epath
    calls = []

    def train(config, wd):
        calls.append((config.stage, config.seed, config.init_from))
        epath(f"{wd}/final_metrics.json").write_text(json.dumps({"score": 1.0}))
        return {"score": 1.0 + config.seed}

    grid = staged_grid()
    out = f"{bucket}/staged/results/g"
    summary = runner.run_grid(grid, out, runner.plan(grid, 2), train_fn=train, load_config=_load, log=lambda m: None,
                              allow_dirty=True)
    assert len(summary.ran) == 4
    stage_calls = [c for c in calls if c[0] != "cell"]
    assert [c[:2] for c in stage_calls] == [("base", 0), ("gate", 0), ("gate", 1)]  # base once, gate per seed
    stages = f"{bucket}/staged/results/_stages"
    assert stage_calls[1][2].startswith(f"{stages}/base-") and stage_calls[1][2].endswith("seed0")
    cells = [c for c in calls if c[0] == "cell"]
    assert cells[1][2].startswith(f"{stages}/gate-") and cells[3][2].endswith("seed1")
    again = runner.run_grid(grid, out, runner.plan(grid, 2), train_fn=train, load_config=_load, log=lambda m: None,
                              allow_dirty=True)
    assert len(again.skipped) == 4 and len(calls) == 7  # records and stages found in the bucket: nothing again
