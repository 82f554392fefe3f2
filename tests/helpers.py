"""Shared test helpers (importable from any test module: conftest.py puts tests/ on sys.path)."""
import contextlib
import json
import os
import sys

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import pytest


def perturbed(params, seed: int, scale: float = 0.3):
    """Unboxed params (or ``{"params": ...}`` variables) with every leaf moved off its init, so norm
    scales leave 1 and scalars leave 0/1 and every term of a formula matters in a comparison."""
    params = nn.unbox(params.get("params", params) if isinstance(params, dict) else params)
    return _perturb(params, seed, scale)


@jax.jit
def _perturb(params, seed, scale):
    """:func:`perturbed` in one compiled program (op by op it compiled three programs per leaf shape)."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [x + scale * jax.random.normal(k, x.shape, x.dtype)
                                               for x, k in zip(leaves, keys)])


def compile_flags() -> str:
    """This session's XLA_FLAGS without the device count (tests/conftest.py sets both): what a process a test
    starts with its own device count should also get, to compile as the test's own process does."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    return " ".join(f for f in flags if "xla_force_host_platform_device_count" not in f)


def rms_ref(x, scale, eps=1e-6):
    """Plain-numpy RMSNorm with a learned scale."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def missing_extra(modules) -> str | None:
    """Why a test of ``modules`` cannot run here (the extra that installs the first missing one), or None."""
    from edge_jax.utils.extras import MissingExtra, installed
    missing = next((m for m in modules if not installed(m)), None)
    return None if missing is None else str(MissingExtra("this test", missing))


def slow_except(values, keep):
    """``values`` as parametrize cases, each not in ``keep`` marked slow: the repetition of a case that
    the fast tier checks once (say at the marked test why the kept cases suffice)."""
    return [v if v in keep else pytest.param(v, marks=pytest.mark.slow) for v in values]


def needs_extra(*modules: str):
    """The marker of a test that needs ``modules`` (packages of an extra, edge_jax.utils.extras.PACKAGES):
    conftest.py skips it where one is missing, with the extra's name, and ``-m needs_extra`` selects every
    such test (scripts/check_installs.sh runs them in the minimal installs)."""
    return pytest.mark.needs_extra(*modules)


def require_extra(*modules: str):
    """At the top of a test module, before it imports ``modules``: skip the whole module unless all are
    installed; else the module's marker (``pytestmark = require_extra(...)``, as :func:`needs_extra`)."""
    reason = missing_extra(modules)
    if reason:  # pytest reports this line as the place: name the module in the reason
        module = os.path.relpath(sys._getframe(1).f_code.co_filename)
        pytest.skip(f"{module}: {reason}", allow_module_level=True)
    return needs_extra(*modules)


# ---- the platform: CPU here and in CI (8 simulated devices, conftest.py), an NVIDIA GPU on the lent
# machine (JAX_PLATFORMS=cuda, one device: scripts/gpu_check.sh, docs/kernels.md "Running the GPU checks")

NO_GPU = "needs an NVIDIA GPU (jax.default_backend() is not 'gpu')"
# a kernel against its reference, relative error; float32 holds on a GPU too once both sides' float32
# dots are exact (:func:`precise_dots`, which conftest.py puts around every test: measured on an H200,
# docs/kernels.md)
KERNEL_TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def on_gpu() -> bool:
    """Whether the tests run on an NVIDIA GPU."""
    return jax.default_backend() == "gpu"


def requires_gpu(test):
    """Marks ``test`` ``gpu`` (``-m gpu`` selects it) and skips it unless JAX runs on an NVIDIA GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not on_gpu(), reason=NO_GPU)(test))


def requires_devices(n: int):
    """The skip mark of a test that builds a mesh of ``n`` devices, on an accelerator with fewer (one GPU).
    On CPU it runs: conftest.py simulates 8 devices there, and a test short of them fails as it should."""
    present = jax.device_count()
    return pytest.mark.skipif(jax.default_backend() != "cpu" and present < n,
                              reason=f"builds a mesh of {n} devices; {present} present")


def kernel_tol(dtype) -> float:
    """The relative error a kernel may have against its reference in ``dtype`` (:data:`KERNEL_TOL`)."""
    return KERNEL_TOL[jax.numpy.dtype(dtype).name]


def precise_dots():
    """A context in which float32 dots are exact on a GPU too (``jax.default_matmul_precision("highest")``;
    by default XLA and Triton run them in TF32 there, which misses 1e-5 by 3e-4 to 7e-4); elsewhere
    nothing changes (CPU and TPU-interpreted dots are float32 already)."""
    return jax.default_matmul_precision("highest") if on_gpu() else contextlib.nullcontext()


def triton_blocks_only(*blocks: int | None):
    """Skip the calling test on a GPU where one of ``blocks`` breaks Triton's rules (a power of two >= 16,
    ``backend.check_triton_blocks``): a case meant for the Mosaic (TPU) variant, which the GPU takes the
    Triton variant for. None: that variant's default."""
    from edge_jax.layers.kernels import backend

    bad = [b for b in blocks if b is not None and backend.triton_dim(b) != b]
    if on_gpu() and bad:
        pytest.skip(f"blocks {bad} are for the TPU (Mosaic) variant; on a GPU the Triton variant refuses them")


def compile_for_tpu(fn, arg_structs, in_specs, out_specs, topology: str = "v5e:2x2"):
    """AOT-compile ``fn`` (a Pallas TPU kernel call) for a TPU slice with libtpu, under ``shard_map``
    over the slice's devices on one mesh axis ``x`` (``in_specs`` / ``out_specs``: PartitionSpecs
    naming ``x``); ``arg_structs`` are the global ``(shape, dtype)`` of the arguments. Returns the
    compiled executable (``memory_analysis()``, ``cost_analysis()``); a block shape Mosaic rejects
    raises here."""
    from jax.sharding import Mesh, NamedSharding

    from edge_jax.compile.chips import make_target

    mesh = Mesh(np.asarray(make_target(topology).devices), ("x",))
    mapped = jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    args = [jax.ShapeDtypeStruct(s, d, sharding=NamedSharding(mesh, spec))
            for (s, d), spec in zip(arg_structs, in_specs)]
    return jax.jit(mapped).lower(*args).compile()


@contextlib.contextmanager
def emulated(variant: str):
    """A context in which the kernels take their ``variant`` ("tpu" or "gpu") as on that platform. The
    variant this machine takes anyway changes nothing: "tpu" on CPU (interpreted) and TPU, "gpu" on a GPU
    (compiled by Triton). The other one runs in the Pallas interpreter (:func:`backend.emulating`): "gpu"
    on this CPU, "tpu" on a GPU. JAX's trace caches do not see the kernel target, so they are cleared on
    entering and leaving an emulated block (a function jitted with a static model would otherwise reuse
    its other trace)."""
    from edge_jax.layers.kernels import backend

    if variant == ("gpu" if on_gpu() else "tpu"):
        yield
        return
    jax.clear_caches()
    try:
        with backend.emulating(variant):
            yield
    finally:
        jax.clear_caches()


def lower_for_gpu(fn, *arg_structs) -> str:
    """Lower ``fn`` for CUDA from this (CPU) process with ``jax.export`` and return the StableHLO
    text: Pallas's Triton lowering runs in full (block shapes, unsupported ops and power-of-two rules
    fail here); only the PTX compile needs a GPU. Traced under ``backend.targeting("gpu")``, so the
    kernels are chosen for a GPU; asserts that at least one Triton call came out."""
    import jax.export

    from edge_jax.layers.kernels import backend

    jax.clear_caches()  # a trace for the CPU (a function jitted with a static model) must not be reused
    with backend.targeting("gpu"):
        exported = jax.export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call(backend.TRITON_CALL)])(*arg_structs)
    text = exported.mlir_module()
    assert f"@{backend.TRITON_CALL}" in text.replace('"', ""), "no Triton kernel in the lowered module"
    return text


def expert_group(G, C, D, F, dtype="float32", seed=0):
    """A static group of ``G`` SwiGLU experts on ``[G, C, D]`` rows: random non-zero rows everywhere
    (padding rows too: a kernel must zero them itself), experts at scale 1/sqrt(fan-in); numpy's
    generator, so no shape compiles a sampler."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(G, C, D))
    gate, up = (rng.normal(size=(G, D, F)) / np.sqrt(D) for _ in range(2))
    down = rng.normal(size=(G, F, D)) / np.sqrt(F)
    return tuple(jnp.asarray(a, dtype) for a in (x, gate, up, down))


def check_expert_rows(got, want, count, tol: float):
    """A grouped expert FFN's output against its reference: the rows past each expert's count exactly
    zero, and (where any row is valid) a non-zero reference met within ``tol`` (relative norm)."""
    from edge_jax.bench.kernels import rel_error

    got32, want32 = np.asarray(got, np.float32), np.asarray(want, np.float32)
    rows_C = np.arange(got32.shape[1])
    for g, n in enumerate(count):
        assert not np.any(got32[g, rows_C >= n]), f"expert {g}: padding rows past {n} are not zero"
    if sum(count):
        assert np.abs(want32).max() > 0 and rel_error(got, want) < tol
    else:
        assert not np.any(got32)


def random_decoder_params(cfg, seed=0):
    """Random non-zero parameters of ``DecoderLM(cfg)`` (no compilation): scales, alpha and beta near 1,
    the rest normal with std 0.1."""
    import jax.numpy as jnp

    from edge_jax.models import DecoderLM
    shapes = jax.eval_shape(DecoderLM(cfg).init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    rng = np.random.default_rng(seed)

    def make(path, s):
        near_one = path[-1].key in ("scale", "alpha", "beta")
        return jnp.asarray(near_one + 0.1 * rng.standard_normal(s.shape), s.dtype)

    return jax.tree_util.tree_map_with_path(make, nn.unbox(shapes))


def config_loader(base: dict):
    """A stand-in for ``edge_jax.config.load_config``: a ConfigDict of ``base`` with the overrides applied
    (an unknown key raises ValueError, as the real loader does)."""
    def load(spec, overrides):
        c = ml_collections.ConfigDict(json.loads(json.dumps(base)))
        for key, value in overrides.items():
            *parents, leaf = key.split(".")
            node = c
            for p in parents:
                node = node[p]
            if leaf not in node:
                raise ValueError(f"unknown config key {key!r}")
            node[leaf] = value
        return c
    return load
