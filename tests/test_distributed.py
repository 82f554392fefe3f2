"""edge_jax.distributed in one process: how a job starts, and the agreement helpers as plain calls.
The multi-process behaviour is tested through the launcher in tests/multihost/."""
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from edge_jax import distributed
from edge_jax.config import ConfigError
from edge_jax.sharding import batch_sharding, make_mesh, process_block, process_rows

ADDRESS = "10.0.0.1:1234"
ROOT = Path(__file__).resolve().parents[1]


def test_a_laptop_is_a_single_process_and_never_waits():
    assert distributed.decide(env={}) == distributed.Startup("single")
    assert distributed.decide(env={"SLURM_JOB_ID": "1"}).how == "single"  # not a complete Slurm step


def test_explicit_settings_from_flags_or_environment():
    env = {"JAX_COORDINATOR_ADDRESS": ADDRESS, "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    assert distributed.decide(env=env) == distributed.Startup("explicit", ADDRESS, 4, 3)
    assert distributed.decide(ADDRESS, 2, 1, env={}) == distributed.Startup("explicit", ADDRESS, 2, 1)
    assert distributed.decide(process_id=0, env=env).process_id == 0        # a flag wins over the environment
    assert distributed.decide(num_processes=1, env={}).how == "single"      # one process needs no coordinator
    assert distributed.decide(env={**env, "EDGE_JAX_DISTRIBUTED": "0"}).how == "single"


@pytest.mark.parametrize("env, missing", [
    ({"JAX_COORDINATOR_ADDRESS": ADDRESS}, "--num-processes (JAX_NUM_PROCESSES) and --process-id (JAX_PROCESS_ID) are"),
    ({"JAX_COORDINATOR_ADDRESS": ADDRESS, "JAX_NUM_PROCESSES": "2"}, "--process-id (JAX_PROCESS_ID) is missing"),
    ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}, "--coordinator-address (JAX_COORDINATOR_ADDRESS) is missing"),
])
def test_incomplete_settings_name_what_is_missing_in_one_line(env, missing):
    with pytest.raises(ConfigError, match=r"^a multi-process start .*" + re.escape(missing)) as e:
        distributed.decide(env=env)
    assert "\n" not in str(e.value) and "edge-jax launch" in str(e.value)


def test_bad_numbers_are_one_line():
    with pytest.raises(ConfigError, match="outside 0..1"):
        distributed.decide(ADDRESS, 2, 2, env={})
    with pytest.raises(ConfigError, match="not an integer"):
        distributed.decide(env={"JAX_NUM_PROCESSES": "two"})
    with pytest.raises(ConfigError, match="at least 1"):
        distributed.decide(ADDRESS, 0, 0, env={})


def test_clusters_jax_detects():
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    assert distributed.decide(env={**slurm, "SLURM_NTASKS": "8"}) == distributed.Startup("cluster", cluster="Slurm")
    assert distributed.decide(env={**slurm, "SLURM_NTASKS": "1"}).how == "single"   # a one-task allocation
    mpi = {"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5", "OMPI_COMM_WORLD_SIZE": "2"}
    assert distributed.decide(env=mpi).cluster == "Open MPI"
    # the coordinator given by hand, the rest from Slurm
    partial = distributed.decide(env={**slurm, "SLURM_NTASKS": "8", "JAX_COORDINATOR_ADDRESS": ADDRESS})
    assert (partial.how, partial.coordinator, partial.cluster) == ("cluster", ADDRESS, "Slurm")


def test_agreement_helpers_are_plain_calls_in_one_process(tmp_path):
    assert distributed.process_count() == 1 and distributed.is_lead()
    assert distributed.on_lead("x", lambda: {"a": 1}) == {"a": 1}
    assert distributed.gather("x", 5) == [5]
    distributed.barrier("x")
    with pytest.raises(KeyError):
        distributed.on_lead("x", lambda: {}["missing"])
    built = []
    target = tmp_path / "artefact"
    for _ in range(2):
        distributed.prepared("artefact", target.exists, lambda: (built.append(1), target.write_text("x")))
    assert built == [1]


def test_rebuilt_errors_keep_their_class_and_line():
    e = distributed._rebuilt("edge_jax.config", "ConfigError", "bad key; fix it")
    assert isinstance(e, ConfigError) and str(e) == "bad key; fix it"
    e = distributed._rebuilt("no.such.module", "Thing", "broke")
    assert isinstance(e, distributed.DistributedError) and "Thing: broke" in str(e)


def test_process_block_is_the_rows_of_this_processs_devices():
    sharding = batch_sharding(make_mesh({"data": -1, "fsdp": 1, "tensor": 1}, jax.devices()[:4]))
    assert process_block(sharding, 8) == (0, 1)  # one process holds every row
    batch = {"inputs": jax.numpy.arange(16).reshape(8, 2)}
    assert (process_rows(batch, sharding)["inputs"] == batch["inputs"]).all()


@pytest.mark.subprocess
@pytest.mark.skipif(distributed.tpu_chips() > 0, reason="a TPU is attached: libtpu rightly starts")
def test_no_libtpu_chatter_on_a_machine_without_a_tpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "params", "--config", "configs/lm.py:size=tiny"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "params" in out.stdout.lower() and out.stderr.strip() == ""


def test_share_is_the_whole_work_alone_and_inside_solo(monkeypatch):
    from edge_jax import distributed
    assert distributed.share() == (0, 1)
    monkeypatch.setattr(distributed, "process_count", lambda: 4)
    monkeypatch.setattr(distributed, "process_index", lambda: 2)
    assert distributed.share() == (2, 4)
    with distributed.solo():
        assert distributed.share() == (0, 1)      # one process's own copy: all of it
