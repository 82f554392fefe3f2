"""A training workdir in a bucket (``--workdir gs://...``), against a local Cloud Storage server (tests/gcs.py):
checkpoints (orbax, its arrays through TensorStore), config, metrics and TensorBoard events are objects; a run
SIGKILLed mid-training resumes with the losses of an uninterrupted one, and a damaged object makes its step
damaged, passed over as on disk. Every run is an ``edge-jax train`` process, as on a TPU host."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import tiny_overrides
from helpers import compile_flags, needs_extra

pytestmark = needs_extra("gcsfs")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bucket():
    from gcs import emulator
    with emulator() as root:
        yield root


def _cli(workdir: str, steps: int, data_dir: str, **extra):
    over = tiny_overrides(**{"train.steps": steps, "train.eval_every": 1000, **extra})
    args = [sys.executable, "-m", "edge_jax.cli", "train", "--config", "configs/lm.py:size=tiny",
            "--workdir", workdir] + [f"--config.{k}={v}" for k, v in over.items()]
    return args, dict(os.environ, EDGE_JAX_DATA=data_dir, XLA_FLAGS=compile_flags())


def _losses(workdir: str) -> dict:
    from edge_jax.train.metrics import read_jsonl
    return {r["step"]: r["loss"] for r in read_jsonl(f"{workdir}/metrics.jsonl") if r["kind"] == "train"}


def _committed(workdir: str) -> list[int]:
    """The bucket's committed checkpoint steps: orbax writes a step in place and commits it with
    commit_success.txt, written just after its checksums.json (edge_jax.train.checksums.ChecksummedCommit)."""
    from edge_jax.utils.storage import files_under
    files = files_under(f"{workdir}/checkpoints")
    return sorted(int(rel.split("/")[0]) for rel in files
                  if rel.count("/") == 1 and rel.endswith("/commit_success.txt") and rel.split("/")[0].isdigit())


def test_a_bucket_workdir_resumes_after_sigkill_as_a_local_run(bucket, tmp_path):
    data_dir = os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data"))
    steps, ref, killed = 60, str(tmp_path / "ref"), f"{bucket}/sigkill"
    args, env = _cli(ref, steps, data_dir, **{"train.ckpt_every": 10})
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    args, env = _cli(killed, steps, data_dir, **{"train.ckpt_every": 10})
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    limit = time.monotonic() + 600  # turns a hung run into a loud failure; no clock races the training
    try:
        while proc.poll() is None:
            if any(s >= 20 for s in _committed(killed)):
                os.kill(proc.pid, signal.SIGKILL)
                break
            if time.monotonic() > limit:
                pytest.fail(f"no committed checkpoint past step 20 in {killed} after 600 s")
            time.sleep(0.05)
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run ended ({proc.returncode}) before it was killed: {err[-2000:]}"
    saved = _committed(killed)
    assert saved and saved[-1] < steps
    resumed = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = _losses(ref), _losses(killed)
    assert sorted(b) == list(range(1, steps + 1))
    assert [a[s] for s in sorted(a)] == [b[s] for s in sorted(b)]  # bitwise on CPU, bucket or disk
    from edge_jax.utils.storage import epath, files_under
    final = json.loads(epath(f"{killed}/final_metrics.json").read_text())
    assert final["val_loss"] == json.loads(open(os.path.join(ref, "final_metrics.json")).read())["val_loss"]
    assert any(rel.startswith("events.out.tfevents.") for rel in files_under(f"{killed}/tb"))


def test_a_damaged_object_makes_its_step_damaged_and_the_run_resumes_from_the_one_before(bucket, tmp_path):
    from edge_jax.utils.storage import epath, files_under
    data_dir = os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data"))
    workdir = f"{bucket}/damaged"
    args, env = _cli(workdir, 6, data_dir, **{"train.ckpt_every": 2})
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    assert _committed(workdir) == [2, 4, 6]
    # one array object of step 6, same size, other bytes: it still parses, only its checksum tells
    name = max((rel for rel in files_under(f"{workdir}/checkpoints/6") if "/d/" in rel),
               key=lambda rel: files_under(f"{workdir}/checkpoints/6")[rel])
    path = epath(f"{workdir}/checkpoints/6/{name}")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    args, env = _cli(workdir, 8, data_dir, **{"train.ckpt_every": 2})
    run = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    warned = [line for line in run.stderr.splitlines() if "damaged" in line]
    assert len(warned) == 1 and f"checkpoint step 6 in {workdir}/checkpoints is damaged" in warned[0], run.stderr
    assert f"{name} does not match its checksum" in warned[0] and "using step 4" in warned[0]
    assert any(rel.startswith("6/") for rel in files_under(f"{workdir}/checkpoints.corrupt"))
    assert _committed(workdir) == [4, 6, 8]  # step 6 trained and saved again (keep_ckpts 3)
    assert sorted(_losses(workdir)) == list(range(1, 9))


def test_a_missing_bucket_is_one_line_before_anything_runs(bucket, tmp_path):
    args, env = _cli("gs://edge-jax-no-such-bucket/w", 4, str(tmp_path / "data"))
    run = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("edge-jax: error: bucket gs://edge-jax-no-such-bucket of gs://edge-jax-no-such-bucket/w "
                           "does not exist"), run.stderr[-2000:]
    assert "gcloud storage buckets create gs://edge-jax-no-such-bucket" in last and "Traceback" not in run.stderr


def test_a_refused_account_is_one_line_and_writes_nothing(bucket):
    from gcs import DENIED, PRIVATE

    from edge_jax.utils.atomic import write_json_atomic
    from edge_jax.utils.storage import StorageError, ensure_usable, epath
    with pytest.raises(StorageError, match=rf"^no valid credentials for gs://{PRIVATE}/w; run `gcloud auth "):
        ensure_usable(f"gs://{PRIVATE}/w")
    ensure_usable(f"gs://{DENIED}/w")  # it may list: the refusal comes with the first write
    with pytest.raises(StorageError, match=rf"^permission denied on gs://{DENIED}/w/config.json; give this "
                                           rf"account roles/storage.objectAdmin on gs://{DENIED}"):
        write_json_atomic(f"gs://{DENIED}/w/config.json", {"a": 1})
    assert not epath(f"gs://{DENIED}/w/config.json").exists()


@pytest.mark.subprocess
def test_two_processes_train_into_a_bucket_and_resume_as_on_disk(bucket, tmp_path):
    """``edge-jax launch --processes 2``: both processes write their shares of each checkpoint into the bucket,
    verify a share of its files on resume, and agree with the same job on disk."""
    data_dir = os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data"))

    def launch(workdir, steps):
        args, env = _cli(workdir, steps, data_dir, **{"train.ckpt_every": 2, "mesh.data": 2})
        job = [sys.executable, "-m", "edge_jax.cli", "launch", "--processes", "2", "--devices-per-process", "1",
               "--", "edge-jax", *args[3:]]
        run = subprocess.run(job, env=env, cwd=REPO, capture_output=True, text=True)
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]

    local, remote = str(tmp_path / "local"), f"{bucket}/two-processes"
    for workdir in (local, remote):  # 6 steps, then resumed to 8 (a longer schedule from step 7 on)
        launch(workdir, 6)
        launch(workdir, 8)
    assert _committed(remote) == [4, 6, 8]
    a, b = _losses(local), _losses(remote)
    assert sorted(b) == list(range(1, 9)) and [a[s] for s in sorted(a)] == [b[s] for s in sorted(b)]


def test_a_bucket_workdir_profiles_evaluates_and_exports_to_hf_on_this_machine(bucket, tmp_path):
    """A pod's run, trained into a bucket with a profiled step, evaluated and exported from there (``edge-jax
    eval`` / ``hf export --workdir gs://...``)."""
    from edge_jax.cli import main
    from edge_jax.interop.safetensors_io import Checkpoint
    workdir = f"{bucket}/to-export"
    args, env = _cli(workdir, 3, os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data")),
                     **{"train.ckpt_every": 3, "train.profile_start": 2, "train.profile_steps": 1})
    subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True)
    from edge_jax.utils.storage import files_under
    traced = [rel for rel in files_under(f"{workdir}/profile") if rel.endswith(".xplane.pb")]
    assert traced and traced[0].startswith("plugins/profile/")  # the trace, uploaded when it stopped
    scored = subprocess.run([sys.executable, "-m", "edge_jax.cli", "eval", "--workdir", workdir, "--batches", "2"],
                            env=env, cwd=REPO, capture_output=True, text=True)
    assert scored.returncode == 0 and "step=3 batches=2" in scored.stdout, scored.stderr[-2000:]
    assert main(["hf", "export", "--workdir", workdir, "--out", str(tmp_path / "hf")]) == 0
    exported = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert exported["num_hidden_layers"] == 2 and exported["hidden_size"] == 64
    assert any(name.endswith("q_proj.weight") for name in Checkpoint(str(tmp_path / "hf")).names())


@pytest.mark.slow  # ~3 min: gcsfs retries a request it cannot send for about a minute before it gives up
def test_a_run_that_loses_the_bucket_stops_in_one_line_and_resumes_from_its_last_committed_step(tmp_path):
    """The server stops mid-run (after a committed checkpoint, before the next): the run ends with one line
    naming the object and the fix; with the server back (its objects kept on disk) the rerun resumes from
    the last committed step and finishes."""
    from gcs import _free_port, emulator
    data_dir = os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data"))
    port, objects = _free_port(), tmp_path / "objects"
    objects.mkdir()
    with emulator(port=port, directory=str(objects)) as root:
        workdir = f"{root}/lost"
        args, env = _cli(workdir, 400, data_dir, **{"train.ckpt_every": 50, "train.log_every": 10})
        proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        limit = time.monotonic() + 600
        while not any(s >= 100 for s in _committed(workdir)):
            assert proc.poll() is None and time.monotonic() < limit, "no committed step 100"
            time.sleep(0.2)
        saved = _committed(workdir)
    try:
        _, err = proc.communicate(timeout=600)  # the server is gone
    finally:
        if proc.poll() is None:
            proc.kill()
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 2, err[-3000:]
    assert last.startswith(f"edge-jax: error: cannot reach Cloud Storage for {workdir}/"), err[-3000:]
    assert "rerun the same command (a run resumes from its last committed checkpoint)" in last
    assert "Traceback" not in err, err[-3000:]
    with emulator(port=port, directory=str(objects)):
        kept = _committed(workdir)
        assert kept[:len(saved)] == saved and max(kept) < 400  # nothing uncommitted listed
        run = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
        assert run.returncode == 0 and "damaged" not in run.stderr, run.stderr[-3000:]
        assert sorted(_losses(workdir)) == list(range(10, 401, 10))
        assert max(_committed(workdir)) == 400
