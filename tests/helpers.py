"""Shared test helpers (importable from any test module: conftest.py puts tests/ on sys.path)."""
import flax.linen as nn
import jax
import numpy as np


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
