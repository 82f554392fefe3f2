"""Multi-process jobs through `edge-jax launch`: 2 processes x 2 CPU devices against 1 x 4 (the one-process
runs here: this process on 4 of its 8 simulated CPU devices, as a launched 1 x 4 job would, without its start-up).

Training losses, a resume under another process count, a grid cell's record (zero-shot scores
included) and who writes which file; and a process killed mid-training ending the job. A streamed
corpus the same, and prepared shards the same whoever prepared them.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest
from helpers import compile_flags

pytestmark = [pytest.mark.subprocess, pytest.mark.multihost]

ROOT = Path(__file__).resolve().parents[2]
AUDITED = str(Path(__file__).with_name("audited.py"))
RTOL = 1e-5  # float32 all-reduces over gloo against one process's: summation order only
TRAIN = ["--config", "configs/lm.py:size=tiny", "--config.train.schedule=constant", "--config.train.warmup_steps=2",
         "--config.train.eval_every=4", "--config.train.ckpt_every=4", "--config.train.eval_batches=2",
         "--config.train.log_every=1",
         "--config.data.seq_len=64", "--config.data.batch_size=8"]
GRID = '''
def get_grid(preset):
    return {
        "name": "multihost", "title": "one cell under two process layouts", "base": "configs/lm.py:size=tiny",
        "base_overrides": {"train.steps": 6, "train.warmup_steps": 2, "train.eval_every": 3, "train.ckpt_every": 3,
                           "train.eval_batches": 2, "data.seq_len": 128, "data.batch_size": 8,
                           "eval.zero_shot": "builtin", "eval.limit": 8, "eval.batch_size": 8},
        "cells": {"dense": {}}, "metric": "val_loss", "lower_is_better": True, "extra_metrics": ["zero_shot_avg"],
        "paper": {"metric": "none", "values": {}, "higher_is_better": False, "source": "test"}, "notes": "",
    }
'''


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return os.environ.get("EDGE_JAX_TEST_DATA") or str(tmp_path_factory.mktemp("data"))


def job_env(data_dir: str, **extra) -> dict:
    """This environment without the test session's device settings (the launcher sets them), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    return {**env, "EDGE_JAX_DATA": data_dir, "XLA_FLAGS": compile_flags(), **extra}


def launch(processes: int, devices: int, command: list[str], data_dir: str, timeout: int = 600, **env) -> str:
    """Run ``command`` as a job of ``processes`` x ``devices``; its output (the test fails on a non-zero status)."""
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "launch", "--processes", str(processes),
                          "--devices-per-process", str(devices), "--", *command], cwd=ROOT,
                         env=job_env(data_dir, **env),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return out.stdout


def train_here(command: list[str], workdir: Path, data_dir: str) -> dict:
    """``edge-jax train COMMAND --workdir WORKDIR`` as a job of one process with 4 CPU devices, run in this
    process (4 of the 8 simulated devices conftest.py sets): its final metrics."""
    from edge_jax.config import load_config
    from edge_jax.train.loop import train_and_evaluate
    spec = command[command.index("--config") + 1]
    overrides = [a[len("--config."):] for a in command if a.startswith("--config.")]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGE_JAX_DATA", data_dir)
        return train_and_evaluate(load_config(spec, overrides), str(workdir), devices=jax.devices()[:4])


def train_losses(workdir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"}


@pytest.mark.timeout(1200)  # the module's first job (data prepared, steps compiled): over 120 s when busy
def test_two_by_two_trains_like_one_by_four_and_resumes_under_one_process(tmp_path, data_dir):
    one, two = tmp_path / "1x4", tmp_path / "2x2"
    train_here([*TRAIN, "--config.train.steps=12"], one, data_dir)
    out = launch(2, 2, ["edge-jax", "train", *TRAIN, "--workdir", str(two), "--config.train.steps=8"], data_dir)
    assert "[0] val_loss=" in out and "[1] val_loss=" in out  # both processes end with the same result line
    assert sorted(os.listdir(two / "checkpoints")) == ["4", "8"]
    # the checkpoint of two processes resumes under one with the same data order and state
    train_here([*TRAIN, "--config.train.steps=12"], two, data_dir)
    expected, got = train_losses(one), train_losses(two)
    assert sorted(got) == sorted(expected) == list(range(1, 13))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=RTOL), step
    final_one = json.loads((one / "final_metrics.json").read_text())
    final_two = json.loads((two / "final_metrics.json").read_text())
    assert final_two["val_loss"] == pytest.approx(final_one["val_loss"], rel=RTOL)


@pytest.mark.timeout(1200)  # two grid jobs, each preparing data and scoring: over 200 s on a busy 2-core machine
def test_a_grid_cell_is_written_once_and_equals_the_single_process_record(tmp_path, data_dir):
    ablation = tmp_path / "multihost_grid.py"
    ablation.write_text(GRID)
    audit = tmp_path / "audit"
    audit.mkdir()
    fresh_data = str(tmp_path / "data")  # prepared in this job: who writes it is audited too
    outs = {n: tmp_path / f"out{n}" for n in (1, 2)}
    grid = ["grid", str(ablation), "--seeds", "1", "--cell", "0", "--no-reuse"]
    launch(2, 2, [sys.executable, AUDITED, *grid, "--out", str(outs[2])], fresh_data,
           AUDIT_ROOTS=os.pathsep.join([str(outs[2]), fresh_data]), AUDIT_DIR=str(audit))
    launch(1, 4, ["edge-jax", *grid, "--out", str(outs[1])], fresh_data)
    written = {p: (audit / f"process{p}.txt").read_text().split() for p in (0, 1)}
    assert any(w.endswith(".json.tmp") or "/records/" in w for w in written[0])
    assert any("/tfds/" in w for w in written[0]) and any("/tokens/" in w for w in written[0])
    # process 1 writes only its own shards' metadata into the checkpoints (orbax: every process saves its shards)
    # and the token shards of its share of the pieces (every other one), never a manifest or a record
    shards = [w for w in written[1] if "/tokens/" in w]
    assert shards and all(int(os.path.basename(w).split(".")[1]) % 2 == 1 for w in shards), shards
    assert all("/checkpoints/" in w and "process_1" in w for w in written[1] if w not in shards), written[1]
    records = {n: json.loads((outs[n] / "records" / "dense__seed0.json").read_text()) for n in outs}
    assert [p.name for p in (outs[2] / "records").iterdir()] == ["dense__seed0.json"]
    assert (records[2]["device"]["process_count"], records[2]["device"]["local_device_count"]) == (2, 2)
    assert (records[1]["device"]["process_count"], records[1]["device"]["device_count"]) == (1, 4)
    timings = {"tokens_per_s", "step_time_s"}
    m1, m2 = records[1]["metrics"], records[2]["metrics"]
    assert set(m1) == set(m2) and {"zero_shot/facts_mc", "zero_shot_avg"} <= set(m1)
    for key in set(m1) - timings:
        assert m2[key] == pytest.approx(m1[key], rel=RTOL), key
    for curve in ("curve", "train_curve"):
        assert [s for s, _ in records[2][curve]] == [s for s, _ in records[1][curve]]
        assert [v for _, v in records[2][curve]] == pytest.approx([v for _, v in records[1][curve]], rel=RTOL)
    assert records[2]["config"] == records[1]["config"]


def test_a_killed_process_ends_the_job_with_a_clear_error(tmp_path, data_dir):
    run = [sys.executable, "-m", "edge_jax.cli", "train", *TRAIN, "--workdir", str(tmp_path / "run"),
           "--config.train.steps=5000", "--config.train.ckpt_every=5000"]
    # process 1 is killed (SIGKILL) once training runs; process 0 is then waiting for it inside a step; each
    # wrapper ends as its process did (killed by the same signal, or with its status)
    script = ("import os, signal, subprocess, sys, time\n"
              f"p = subprocess.Popen({run!r})\n"
              "if os.environ['JAX_PROCESS_ID'] == '1':\n"
              "    workdir = sys.argv[1]\n"
              "    while not os.path.exists(os.path.join(workdir, 'metrics.jsonl')): time.sleep(0.2)\n"
              "    time.sleep(2); p.kill()\n"
              "rc = p.wait()\n"
              "os.kill(os.getpid(), -rc) if rc < 0 else sys.exit(rc)\n")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "launch", "--processes", "2", "--devices-per-process",
                          "2", "--", sys.executable, "-c", script, str(tmp_path / "run")], cwd=ROOT,
                         env=job_env(data_dir), capture_output=True, text=True, timeout=600)
    assert out.returncode == 137, out.stdout[-2000:]
    assert "edge-jax launch: process 1 was killed by SIGKILL (exit 137)" in out.stdout
    # the survivor stopped by itself at once, in one line, without JAX's crash dump
    assert "[0] edge-jax: error: process 1 of the job was lost (killed, or its host went away); stopping process 0; " \
           "rerun the same command on every process" in out.stdout, out.stdout[-3000:]
    assert "stopped process 0" not in out.stdout and "Check failure" not in out.stdout, out.stdout[-3000:]
    killed_at = (tmp_path / "run" / "metrics.jsonl").stat().st_mtime
    assert time.time() - killed_at < 60 and time.monotonic() - t0 < 300  # seconds after the kill, not a hang


def _corpus(path: Path) -> str:
    """A JSONL corpus of three files: enough windows for a few hundred steps of 8 x 64."""
    import random
    rng = random.Random(0)
    path.mkdir(parents=True)
    for f in range(3):
        with open(path / f"{f}.jsonl", "w") as out:
            for _ in range(400):
                words = " ".join(rng.choice(["the", "model", "reads", "streams", "of", "text", "rows"])
                                 for _ in range(rng.randint(5, 120)))
                out.write(json.dumps({"text": words}) + "\n")
    return f"jsonl:{path}/*.jsonl"


def test_a_streamed_corpus_trains_alike_on_two_processes_and_resumes_under_one(tmp_path, data_dir):
    name = _corpus(tmp_path / "corpus")
    run = [*TRAIN, f"--config.data.name={name}", "--config.data.workers=1"]
    one, two = tmp_path / "1x4", tmp_path / "2x2"
    train_here([*run, "--config.train.steps=8"], one, data_dir)
    launch(2, 2, ["edge-jax", "train", *run, "--workdir", str(two), "--config.train.steps=4"], data_dir)
    state = json.loads((two / "checkpoints" / "4" / "data" / "metadata").read_text())
    assert sorted(state["stream_rows"], key=int) == [str(r) for r in range(8)]  # both processes' rows, saved once
    train_here([*run, "--config.train.steps=8"], two, data_dir)
    expected, got = train_losses(one), train_losses(two)
    assert sorted(got) == sorted(expected) == list(range(1, 9))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=RTOL), step
    tokens = Path(data_dir) / "tokens"
    assert not tokens.exists() or not any("jsonl-" in p for p in os.listdir(tokens))   # streamed: nothing prepared


def test_two_processes_prepare_the_shards_one_process_would(tmp_path, data_dir):
    name = _corpus(tmp_path / "corpus")
    prep = ["edge-jax", "data", "prepare", "--config", "configs/lm.py:size=tiny", f"--config.data.name={name}"]
    launch(1, 1, [*prep, f"--config.data.tokens_dir={tmp_path / 'one'}"], data_dir)
    out = launch(2, 1, [*prep, f"--config.data.tokens_dir={tmp_path / 'two'}"], data_dir)
    assert "by 2 process(es)" in out
    for split in ("train", "validation"):
        [a] = (tmp_path / "one").glob(f"*-{split}-byte")
        [b] = (tmp_path / "two").glob(f"*-{split}-byte")
        assert sorted(os.listdir(a)) == sorted(os.listdir(b))
        for f in os.listdir(a):
            assert (a / f).read_bytes() == (b / f).read_bytes(), f


@pytest.mark.timeout(1200)  # two jobs of two processes: over 120 s on a busy 2-core machine
def test_sigterm_to_one_process_stops_every_process_at_one_saved_step(tmp_path, data_dir):
    """JAX's preemption service: process 1 gets SIGTERM, both save the same step and exit 75; the job resumes."""
    wd = tmp_path / "run"
    run = [sys.executable, "-m", "edge_jax.cli", "train", *TRAIN, "--workdir", str(wd),
           "--config.train.steps=400", "--config.train.ckpt_every=400", "--config.train.eval_every=400"]
    script = ("import os, signal, subprocess, sys, time\n"
              f"p = subprocess.Popen({run!r})\n"
              "if os.environ['JAX_PROCESS_ID'] == '1':\n"
              "    while not os.path.exists(os.path.join(sys.argv[1], 'metrics.jsonl')): time.sleep(0.1)\n"
              "    p.send_signal(signal.SIGTERM)\n"
              "sys.exit(p.wait())\n")
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "launch", "--processes", "2", "--devices-per-process",
                          "2", "--", sys.executable, "-c", script, str(wd)], cwd=ROOT,
                         env=job_env(data_dir), capture_output=True, text=True, timeout=600)
    assert out.returncode == 75, out.stdout[-3000:]
    stopped = [line.split("after step ")[1].split()[0] for line in out.stdout.splitlines()
               if "edge-jax: preempted: stopped by SIGTERM after step " in line]
    assert len(stopped) == 2 and stopped[0] == stopped[1], out.stdout[-3000:]
    cut = int(stopped[0])
    assert os.listdir(wd / "checkpoints") == [str(cut)] and max(train_losses(wd)) == cut
    more = [*TRAIN, f"--config.train.steps={cut + 3}", "--config.train.ckpt_every=400", "--config.train.eval_every=400"]
    launch(2, 2, ["edge-jax", "train", *more, "--workdir", str(wd)], data_dir)
    train_here(more, tmp_path / "whole", data_dir)
    expected, got = train_losses(tmp_path / "whole"), train_losses(wd)
    assert sorted(got) == sorted(expected) == list(range(1, cut + 4))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=RTOL), step
