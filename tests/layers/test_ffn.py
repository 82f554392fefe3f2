"""FFN kinds against their formulas, and the activation mask's fast path against the sort."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.layers.ffn import FFN, mask_smallest, mask_smallest_reference

FORMULAS = {
    "relu2": lambda p, x: (np.maximum(x @ p["up"], 0) ** 2) @ p["down"],
    "relu": lambda p, x: np.maximum(x @ p["up"], 0) @ p["down"],
    "gelu": lambda p, x: np.asarray(jax.nn.gelu(x @ p["up"], approximate=False)) @ p["down"],
    "swiglu": lambda p, x: ((x @ p["gate"]) / (1 + np.exp(-(x @ p["gate"]))) * (x @ p["up"])) @ p["down"],
}


@pytest.mark.parametrize("kind", sorted(FORMULAS))
def test_ffn_matches_formula(kind):
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    params = perturbed(jax.jit(FFN(kind, 24).init)(jax.random.key(1), x), 2)
    got = jax.jit(FFN(kind, 24).apply)({"params": params}, x)
    kernels = {k: np.asarray(v["kernel"], np.float64) for k, v in params.items()}
    assert set(kernels) == ({"gate", "up", "down"} if kind == "swiglu" else {"up", "down"})
    np.testing.assert_allclose(np.asarray(got), FORMULAS[kind](kernels, np.asarray(x, np.float64)),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("ratio", [0.0, 0.03, 0.5, 0.61, 0.9, 0.999, 1.0])
def test_mask_smallest_matches_sort_reference(dtype, ratio):
    a = jax.random.normal(jax.random.key(4), (3, 7, 50)).astype(dtype) * 3
    a = jnp.where(a > 0.4, a * a, jnp.where(a < -2, a, 0))  # exact zeros, ties and both signs
    fast, ref = mask_smallest(a, ratio), mask_smallest_reference(a, ratio)
    np.testing.assert_array_equal(np.asarray(fast, np.float32), np.asarray(ref, np.float32))
    assert int(np.sum(np.asarray(fast) == 0)) >= np.ceil(ratio * a.size - 1e-6)
    if ratio == 0:
        np.testing.assert_array_equal(np.asarray(fast), np.asarray(a))
    kept = np.abs(np.asarray(a, np.float32))[np.asarray(fast) != 0]
    dropped = np.abs(np.asarray(a, np.float32))[(np.asarray(fast) == 0) & (np.asarray(a) != 0)]
    if kept.size and dropped.size:
        assert dropped.max() <= kept.min()  # only the smallest magnitudes go


def test_mask_ratio_is_traceable_and_sows_zero_fraction():
    x = jax.random.normal(jax.random.key(0), (2, 8, 16))
    ffn = FFN("swiglu", 32)
    params = jax.jit(ffn.init)(jax.random.key(1), x)

    @jax.jit
    def run(r):
        return ffn.apply(params, x, r, mutable=["intermediates"])

    _, state = run(0.0)
    assert float(state["intermediates"]["zero_fraction"][0]) == 0.0
    _, state = run(0.75)
    assert abs(float(state["intermediates"]["zero_fraction"][0]) - 0.75) < 1e-6
