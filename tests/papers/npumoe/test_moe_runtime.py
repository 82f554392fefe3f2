"""LayerRuntime (separately dispatched static expert graphs) against capacity_moe on several plans,
its expert call count, the host fallback, the overflow on the host fallback (against the MoE layer's
output), and time_runtime."""
import functools

import flax.linen as nn
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


@pytest.mark.parametrize("name", sorted(PLANS))
def test_overflow_fallback_runtime_is_exact(name):
    """overflow="fallback": the static experts' overflow joins the host fallback call (made even without
    cold experts): the output is capacity_moe's with the same policy, and dropless."""
    chunk, experts = _inputs()
    plan = PLANS[name]
    rt = LayerRuntime(plan, experts, overflow="fallback")
    y = rt(*chunk)
    want, stats = jax.jit(execute.capacity_moe, static_argnums=6, static_argnames="overflow")(
        *chunk, experts, plan, overflow="fallback")
    x, ids, w, _, valid = chunk
    exact = execute.moe_reference(x, ids, w, experts, valid_N=valid)
    for ref in (np.asarray(want), exact):
        np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5 * float(np.abs(exact).max()))
    assert rt.expert_calls == rt.dispatched == len(plan.groups) + 1 == plan.expert_calls(True)
    assert int(stats["dropped"]) == 0 and int(stats["fallback"]) == int(stats["routed"]) - int(stats["kept"])
    if name == "uniform_drops":
        assert int(_expected(name)[1]["dropped"]) > 0 and int(stats["fallback"]) > 0


@pytest.mark.parametrize("overflow", ["drop", "fallback"])
def test_runtime_matches_the_layer(overflow):
    """The runtime on the hidden states a MoE layer sows equals that layer's output, chunk by chunk (the
    layer: vmapped chunks, one exact ragged call over all of them; the runtime: the host fallback per chunk)."""
    from edge_jax.layers.moe.layer import MoE
    from edge_jax.layers.moe.plan import MoEExec
    chunk = 16
    plans = {"uniform": uniform_plan(E, 3, 4), "npumoe": tiered_plan(LOAD, chunk, K, group=2, hot_fraction=0.5)}
    x_BTD = jax.random.normal(jax.random.key(0), (2, 20, D))  # 40 tokens: chunks of 16, the last one padded
    for strategy, plan in plans.items():
        layer = MoE(E, K, F, execution=MoEExec(strategy, chunk, "saliency", (), overflow), plan=plan)
        params = nn.unbox(jax.jit(MoE(E, K, F).init)(jax.random.key(1), x_BTD))
        params = jax.tree_util.tree_map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(2), a.shape), params)
        sal = jax.random.uniform(jax.random.key(3), (2, 20), minval=0.1)
        y_BTD, inter = jax.jit(lambda p, a, s: layer.apply(p, a, s, mutable=["intermediates"]))(params, x_BTD, sal)
        r = inter["intermediates"]["routing"][0]
        parts = execute.chunked(r["x"].reshape(40, D), r["ids"].reshape(40, K), r["weights"].reshape(40, K),
                                r["saliency"].reshape(40), chunk, "saliency")
        p = params["params"]
        rt = LayerRuntime(plan, tuple(p[k] for k in ("gate", "up", "down")), overflow=overflow)
        y = np.concatenate([np.asarray(rt(*(a[i] for a in parts))) for i in range(len(parts[0]))])[:40]
        want = np.asarray(y_BTD).reshape(40, D)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
        stats = inter["intermediates"]["moe_stats"][0]
        assert (int(stats["dropped"]) == 0) == (overflow == "fallback") and int(stats["kept"]) < 80


def test_weight_mismatch_and_time_runtime():
    chunk, experts = _inputs()
    with pytest.raises(ValueError, match="plan has 4 experts"):
        LayerRuntime(uniform_plan(4, 8, 1), experts)
    secs = time_runtime(LayerRuntime(PLANS["tiered_groups"], experts), [chunk, _inputs(1)[0]], repeats=1)
    assert 0 < secs < 1
