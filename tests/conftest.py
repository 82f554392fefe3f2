"""Test setup: 8 simulated CPU devices (for the sharding tests), one XLA compilation cache for the whole
run, every registry filled (:func:`edge_jax.plugins.load`) and a shared tiny config."""
import importlib
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # `from helpers import ...` from any subfolder
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compiled to be checked, not timed: on the CPU, XLA's backend at -O0 without LLVM's expensive passes takes 20-35%
# less time to compile the tiny programs the tests build, and the elemental emitters in place of the MLIR fusion
# emitters take a further ~35% off (most of all for the single ops run eagerly); compiling is most of the suite's
# time (docs/testing.md). A GPU run (JAX_PLATFORMS=cuda) compiles as users do. Every process a test starts gets the
# same flags (helpers.compile_flags), so results compared across processes are compiled alike. A run given
# XLA_FLAGS keeps them.
FAST_COMPILE = (" --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
                " --xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8"
                      + (FAST_COMPILE if os.environ["JAX_PLATFORMS"] == "cpu" else ""))
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # TPU compiles in several processes at once
# gcsfs probes every bucket over gRPC for its type (zonal, hierarchical) before it reads; the local GCS server of
# the gs:// tests (tests/gcs.py) serves JSON only, and gcsfs would wait 60 s for the probe. Read when gcsfs
# is imported, so set before anything imports it.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
# One persistent compilation cache per test run, made by the first process (pytest, or xdist's controller)
# and inherited by the xdist workers and every process a test spawns: a program compiled once (the tiny
# model's steps, mostly) is read back by every later test that builds it, in any process. Every program is
# cached (no minimum compile time or size). A run given JAX_COMPILATION_CACHE_DIR keeps that directory.
OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="edge_jax_test_xla_cache_")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import pytest  # noqa: E402

from edge_jax import plugins  # noqa: E402
from edge_jax.compile.gpus import has_plugin  # noqa: E402

if has_plugin():
    # The cuda extra: its plugin prints two lines to stderr when JAX starts its backends on a machine
    # without an NVIDIA driver. Start them now, so the lines land here and not in the output of
    # whichever test would start them first (tests that read a command's stderr).
    import jax  # noqa: E402
    jax.devices()

plugins.load()  # every registry full before a test module reads one, as the CLI fills them before a command runs
# The HF families register when the converters first import their package (not a plugin: import and export
# load it on use); imported here so that the registry guard below sees them before a test does.
importlib.import_module("edge_jax.interop.families")


class RegistrySnapshot:
    """The names of every registry (:meth:`edge_jax.registry.Registry.instances`) when made; :meth:`changes`
    says, in one line, which of those registries hold other names now ('' when none)."""

    def __init__(self):
        from edge_jax.registry import Registry
        self.names = [(reg, reg.names()) for reg in Registry.instances()]

    def changes(self) -> str:
        found = []
        for reg, names in self.names:
            now = reg.names()
            if now != names:
                added, gone = [n for n in now if n not in names], [n for n in names if n not in now]
                found.append(f"{reg.axis!r} " + (f"left {added}" if added else "") + (" " if added and gone else "")
                             + (f"lost {gone}" if gone else "") + ("" if added or gone else "reordered"))
        return "; ".join(found)


@pytest.fixture(autouse=True)
def registries_left_as_found():
    """Fails a test that leaves a registry other than it found it: register a test's variant with
    ``with REGISTRY.override(name, obj):`` (in the test or a fixture), never with ``register``."""
    before = RegistrySnapshot()
    yield
    changed = before.changes()
    if changed:
        pytest.fail(f"this test changed registries: {changed}; register for one test with REGISTRY.override(name, obj)",
                    pytrace=False)


@pytest.fixture(autouse=True)
def float32_dots_exact():
    """Every test runs with exact float32 dots on a GPU (helpers.precise_dots; not TF32, which misses the
    float32 tolerances of the kernel and reference comparisons); elsewhere nothing changes."""
    from helpers import precise_dots
    with precise_dots():
        yield


def pytest_unconfigure(config):
    """The process that made the run's compilation cache removes it (xdist's workers found it made)."""
    if OWN_CACHE:
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(items):
    """Skip the tests marked ``needs_extra(*modules)`` (helpers.needs_extra) where a module is missing."""
    from helpers import missing_extra
    for item in items:
        for mark in item.iter_markers("needs_extra"):
            reason = missing_extra(mark.args)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


def tiny_overrides(**extra):
    """A config small enough for a test to train a few steps in seconds."""
    base = {
        "model.d_model": 64, "model.n_layers": 2, "model.n_heads": 4, "model.n_kv_heads": 2,
        "model.head_dim": 16, "model.d_ff": 128, "data.seq_len": 32, "data.batch_size": 8,
        "train.steps": 12, "train.warmup_steps": 2, "train.log_every": 1, "train.eval_every": 6,
        "train.eval_batches": 2, "train.ckpt_every": 4, "mesh.data": 1,
    }
    base.update(extra)
    return base


@pytest.fixture
def tiny_config(tmp_path, monkeypatch):
    from edge_jax.config import load_config
    monkeypatch.setenv("EDGE_JAX_DATA", os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data")))

    def make(**extra):
        return load_config("configs/lm.py:size=tiny", tiny_overrides(**extra))

    return make
