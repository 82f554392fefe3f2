"""LayerRuntime (separately dispatched static expert graphs) against capacity_moe on several plans,
its expert call count, the host fallback, and time_runtime."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import tiered_plan, uniform_plan
from edge_jax.papers.npumoe.runtime import LayerRuntime, time_runtime

N, D, F, E, K = 48, 16, 24, 8, 2
LOAD = np.array([40, 25, 12, 8, 6, 4, 3, 2])  # skewed calibration loads


def _inputs(seed=0, invalid=3):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
    logits = rng.normal(size=(N, E)) + np.log(LOAD / LOAD.sum())
    ids = np.argsort(-logits, axis=1)[:, :K]
    w = jnp.asarray(rng.uniform(0.2, 1.0, (N, K)), jnp.float32)
    score = jnp.asarray(rng.uniform(0.1, 1.0, N), jnp.float32)
    valid = jnp.asarray(np.arange(N) < N - invalid)
    experts = tuple(jnp.asarray(rng.normal(size=s) / np.sqrt(s[1]), jnp.float32)
                    for s in ((E, D, F), (E, D, F), (E, F, D)))
    return (x, jnp.asarray(ids, jnp.int32), w, score, valid), experts


PLANS = {
    "uniform_drops": uniform_plan(E, 6, 1),  # base capacity 12; the busy experts drop copies
    "uniform_grouped": uniform_plan(E, 8, 4),
    "tiered_groups": tiered_plan(LOAD, N, K, group=2),
    "tiered_fallback": tiered_plan(LOAD, N, K, group=2, hot_fraction=0.5),
}


@functools.lru_cache(maxsize=None)
def _expected(name):
    (x, ids, w, score, valid), experts = _inputs()
    y, stats = jax.jit(execute.capacity_moe, static_argnums=6)(x, ids, w, score, valid, experts, PLANS[name])
    return y, stats


@pytest.mark.parametrize("name", sorted(PLANS))
def test_runtime_matches_capacity_moe(name):
    chunk, experts = _inputs()
    plan = PLANS[name]
    rt = LayerRuntime(plan, experts)
    y = rt(*chunk)
    want, stats = _expected(name)
    assert float(jnp.abs(want).max()) > 0
    np.testing.assert_allclose(np.asarray(y), np.asarray(want), rtol=1e-5, atol=1e-5 * float(jnp.abs(want).max()))
    assert rt.expert_calls == plan.calls == rt.dispatched
    assert rt.expert_calls == len(plan.groups) + bool(plan.fallback)
    if name == "uniform_drops":
        assert int(stats["dropped"]) > 0
    if name == "tiered_fallback":
        assert plan.fallback and int(stats["fallback"]) > 0


def test_runtime_matches_reference_dropless_when_capacity_suffices():
    chunk, experts = _inputs()
    rt = LayerRuntime(uniform_plan(E, N, 4), experts)  # capacity N: nothing dropped
    x, ids, w, _, valid = chunk
    want = execute.moe_reference(x, ids, w, experts, valid_N=valid)
    np.testing.assert_allclose(np.asarray(rt(*chunk)), want, rtol=1e-5, atol=1e-5)


def test_fallback_runs_on_the_host():
    chunk, experts = _inputs()
    rt = LayerRuntime(PLANS["tiered_fallback"], experts)
    x, ids, w, _, valid = chunk
    want = execute.ragged(x, ids, w * valid[:, None], experts, PLANS["tiered_fallback"].fallback)
    np.testing.assert_allclose(np.asarray(rt.fallback(x, ids, w, valid)), np.asarray(want), rtol=1e-5,
                               atol=1e-5 * float(jnp.abs(want).max()))


def test_weight_mismatch_and_time_runtime():
    chunk, experts = _inputs()
    with pytest.raises(ValueError, match="plan has 4 experts"):
        LayerRuntime(uniform_plan(4, 8, 1), experts)
    secs = time_runtime(LayerRuntime(PLANS["tiered_groups"], experts), [chunk, _inputs(1)[0]], repeats=1)
    assert 0 < secs < 1
