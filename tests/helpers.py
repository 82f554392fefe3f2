"""Shared test helpers (importable from any test module: conftest.py puts tests/ on sys.path)."""
import importlib.util

import flax.linen as nn
import jax
import numpy as np
import pytest


def perturbed(params, seed: int, scale: float = 0.3):
    """Unboxed params (or ``{"params": ...}`` variables) with every leaf moved off its init, so norm
    scales leave 1 and scalars leave 0/1 and every term of a formula matters in a comparison."""
    params = nn.unbox(params.get("params", params) if isinstance(params, dict) else params)
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [x + scale * jax.random.normal(k, x.shape, x.dtype)
                                               for x, k in zip(leaves, keys)])


def rms_ref(x, scale, eps=1e-6):
    """Plain-numpy RMSNorm with a learned scale."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu not installed (pip install -e '.[tpu]')")


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
