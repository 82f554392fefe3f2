"""MoE execution strategies against the per-expert Python loop, plans, the layer in the decoder, config errors."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    requires_devices,
)

from edge_jax.config import ConfigError, apply_overrides, base_config, validate
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import (
    LayerPlan,
    MoEExec,
    busiest_capacity,
    tiered_plan,
    uniform_plan,
)
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.train.step import auxiliary_loss

TOL = {jnp.float32: 2e-5, jnp.bfloat16: 3e-2}


def routed(n=96, d=16, f=24, e=8, k=2, seed=0, dtype=jnp.float32):
    """Random tokens, skewed routing (biased logits), random non-zero saliency and expert weights."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d)), dtype)
    experts = tuple(jnp.asarray(rng.normal(size=s) / np.sqrt(s[1]), dtype) for s in [(e, d, f), (e, d, f), (e, f, d)])
    logits = rng.normal(size=(n, e)) + np.linspace(2, -2, e)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    ids = np.argsort(-p, 1)[:, :k]
    w = np.take_along_axis(p, ids, 1)
    sal = rng.random(n) + 0.1
    return x, jnp.asarray(ids, jnp.int32), jnp.asarray(w, dtype), jnp.asarray(sal, jnp.float32), experts


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("strategy", ["dropless", "ragged"])
def test_exact_strategies_match_the_loop(strategy, dtype):
    x, ids, w, _, experts = routed(dtype=dtype)
    got = jax.jit(getattr(execute, strategy))(x, ids, w, experts)
    f32 = tuple(a.astype(jnp.float32) for a in experts)
    assert rel_err(got, execute.moe_reference(x.astype(jnp.float32), ids, w.astype(jnp.float32), f32)) < TOL[dtype]


def _plans(ids, e=8, k=2, n=96):
    load = np.bincount(np.asarray(ids).ravel(), minlength=e)
    return {"uniform_drops": uniform_plan(e, 10, 4), "uniform_per_expert": uniform_plan(e, 20, 1),
            "tiers": tiered_plan(load, n, k, group=1), "tiers_grouped": tiered_plan(load, n, k, group=2),
            "residency": tiered_plan(load, n, k, group=2, hot_fraction=0.5)}


@pytest.mark.parametrize("drop", ["saliency", "position"])
def test_capacity_strategies_match_the_loop(drop):
    x, ids, w, sal, experts = routed()
    n = x.shape[0]
    valid = jnp.arange(n) < n - 7  # a padded last chunk
    score = sal if drop == "saliency" else -jnp.arange(n, dtype=jnp.float32)
    for name, plan in _plans(ids).items():
        y, stats = jax.jit(lambda *a, p=plan: execute.capacity_moe(*a, experts, p))(x, ids, w, score, valid)
        ref = execute.moe_reference(x, ids, w, experts, score, valid, np.array(plan.capacity))
        assert rel_err(y, ref) < 2e-5, name
        s = {k: int(v) for k, v in stats.items()}
        assert s["routed"] == 2 * (n - 7) == s["kept"] + s["dropped"] + s["fallback"], name
        assert s["padded"] == plan.buffer_rows - s["kept"] >= 0, name
    assert int(jax.jit(lambda *a: execute.capacity_moe(*a, experts, _plans(ids)["uniform_drops"]))(
        x, ids, w, score, valid)[1]["dropped"]) > 0  # the uniform plan above really drops


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_overflow_fallback_is_exact(dtype):
    """moe.overflow=fallback: the overflow runs on the exact path, so every plan, down to capacity 1 (nearly
    everything overflows), gives the dropless output; nothing is dropped, the overflow counts as fallback."""
    x, ids, w, sal, experts = routed(dtype=dtype)
    n = x.shape[0]
    valid = jnp.arange(n) < n - 7  # a padded last chunk
    f32 = tuple(a.astype(jnp.float32) for a in experts)
    exact = execute.moe_reference(x.astype(jnp.float32), ids, w.astype(jnp.float32), f32, valid_N=valid)
    plans = {**_plans(ids), "uniform_c1_g8": uniform_plan(8, 1, 8), "uniform_c1_g1": uniform_plan(8, 1, 1),
             "uniform_c3_g2": uniform_plan(8, 3, 2)}
    out = jax.jit(lambda *a: {(name, o): execute.capacity_moe(*a, experts, p, overflow=o)  # one compile
                              for name, p in plans.items() for o in ("drop", "fallback")})(x, ids, w, sal, valid)
    for name in plans:
        (y, s), (_, d) = out[name, "fallback"], out[name, "drop"]
        assert rel_err(y, exact) < TOL[dtype], name
        s, d = {k: int(v) for k, v in s.items()}, {k: int(v) for k, v in d.items()}
        assert s["dropped"] == 0 and s["fallback"] == d["fallback"] + d["dropped"], name
        assert s["routed"] == s["kept"] + s["fallback"] and (s["kept"], s["padded"]) == (d["kept"], d["padded"]), name
        if name.startswith("uniform_c1_"):
            assert d["dropped"] > 0.8 * d["routed"], name  # capacity 1 overflows heavily
    with pytest.raises(ConfigError, match="moe.overflow"):
        execute.capacity_moe(x, ids, w, sal, valid, experts, plans["tiers"], overflow="spill")


def test_saliency_keeps_the_most_salient_copies():
    x, ids, w, sal, experts = routed(n=32, e=4, k=1)
    plan = uniform_plan(4, 3, 4)
    slot, kept, _ = execute.pack(ids, sal, jnp.ones(32, bool), plan)
    for e in range(4):
        mine = np.nonzero(np.asarray(ids[:, 0]) == e)[0]
        best = mine[np.argsort(-np.asarray(sal)[mine], kind="stable")[:3]]
        assert set(np.nonzero(np.asarray(kept))[0]) & set(mine) == set(best)
    assert len(set(np.asarray(slot)[np.asarray(kept)])) == int(kept.sum())  # kept copies never share a row


def test_plans():
    load = np.array([40, 20, 10, 6, 2, 1, 1, 0])
    p = tiered_plan(load, chunk=64, top_k=2, multipliers=(0.5, 1, 2, 4), group=2, hot_fraction=0.5)
    # base 16, tiers 8/16/32/64; expected rows 1.6 x load: 64, 32, 16, 9.6 -> the smallest tier above
    assert p.capacity == (64, 32, 16, 16, 0, 0, 0, 0) and p.fallback == (4, 5, 6, 7)
    assert p.groups == ((0,), (1,), (2, 3)) and p.calls == 4 and p.buffer_rows == 128
    assert busiest_capacity(load, 64, 2) == int(np.ceil(40 / load.mean() * 16))
    assert tiered_plan(load, 64, 2, tiers=False).capacity == (busiest_capacity(load, 64, 2),) * 8
    with pytest.raises(ValueError, match="exactly once"):
        LayerPlan((4, 4), ((0,),))
    with pytest.raises(ValueError, match="one positive capacity"):
        LayerPlan((4, 8), ((0, 1),))


def tiny_moe(strategy="dropless", plans=(), chunk=24, overflow="drop", **kw):
    cfg = ModelConfig(vocab_size=64, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
                      moe_experts=8, moe_top_k=2, moe_d_ff=12, moe_aux_weight=0.01,
                      moe_exec=MoEExec(strategy, chunk, "saliency", plans, overflow), **kw)
    return DecoderLM(cfg)


def _tiny_params():
    tokens = jax.random.randint(jax.random.key(0), (2, 20), 0, 64)  # 40 tokens: chunks of 24, last one padded
    params = jax.jit(tiny_moe().init)(jax.random.key(1), tokens)["params"]
    params = jax.tree_util.tree_map(lambda a: a + 0.2 * jax.random.normal(jax.random.key(2), a.shape), params)
    return tokens, params


def test_decoder_strategies_agree_when_nothing_drops():
    tokens, params = _tiny_params()
    ref = jax.jit(tiny_moe().apply)({"params": params}, tokens)
    roomy = (uniform_plan(8, 24, 4),) * 2
    for model in (tiny_moe("ragged"), tiny_moe("uniform", roomy), tiny_moe("npumoe", (tiered_plan(
            np.ones(8), 24, 2, multipliers=(4,), group=2, hot_fraction=0.5),) * 2)):
        assert rel_err(jax.jit(model.apply)({"params": params}, tokens), ref) < 1e-5
    tight = tiny_moe("uniform", (uniform_plan(8, 2, 8),) * 2)
    logits, inter = jax.jit(lambda p, t: tight.apply(p, t, mutable=["intermediates", "losses"]))(
        {"params": params}, tokens)
    stats = inter["intermediates"]["layers_0"]["moe"]["moe_stats"][0]
    assert int(stats["dropped"]) > 0 and rel_err(logits, ref) > 1e-3
    assert float(auxiliary_loss(inter)) > 0 and "ffn" not in params["layers_0"]


@pytest.mark.parametrize("kernels", ["xla", "pallas"])
def test_decoder_overflow_fallback_equals_dropless(kernels):
    """The model forward (per-chunk vmap, the exact path once for all chunks) with moe.overflow=fallback gives
    the dropless logits at capacities that overflow heavily, with and without cold experts; under
    model.kernels=pallas too (the static buffers are unchanged). moe_stats: nothing dropped."""
    tokens, params = _tiny_params()
    ref = jax.jit(tiny_moe(kernels=kernels).apply)({"params": params}, tokens)
    cold = tiered_plan(np.arange(8, 0, -1), 24, 2, multipliers=(0.25,), group=2, hot_fraction=0.5)
    cases = [(plans, o) for plans in ((uniform_plan(8, 1, 8),) * 2, (uniform_plan(8, 3, 1),) * 2, (cold,) * 2)
             for o in ("fallback", "drop")]
    models = [tiny_moe("npumoe" if plans[0].fallback else "uniform", plans, overflow=o, kernels=kernels)
              for plans, o in cases]
    out = jax.jit(lambda p, t: [m.apply(p, t, mutable=["intermediates"]) for m in models])(  # one compile
        {"params": params}, tokens)
    if kernels == "pallas":
        assert "pallas_call" in str(jax.make_jaxpr(models[0].apply)({"params": params}, tokens))
    for i in range(0, len(cases), 2):
        plans, ((got, inter), (dropped, inter_d)) = cases[i][0], out[i:i + 2]
        s = {k: int(v) for k, v in inter["intermediates"]["layers_0"]["moe"]["moe_stats"][0].items()}
        d = {k: int(v) for k, v in inter_d["intermediates"]["layers_0"]["moe"]["moe_stats"][0].items()}
        assert rel_err(got, ref) < 1e-5 and rel_err(dropped, ref) > 1e-3, plans[0]
        assert s["dropped"] == 0 < d["dropped"] and s["fallback"] == d["fallback"] + d["dropped"] > 0, plans[0]
        assert s["routed"] == 80 == s["kept"] + s["fallback"], plans[0]


def test_moe_layers_subset():
    model = tiny_moe(moe_layers=(1,))
    params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    assert "ffn" in params["layers_0"] and set(params["layers_1"]["moe"]) == {"router", "gate", "up", "down"}
    assert model.cfg.moe_layer_ids() == (1,)
    assert dataclasses.replace(model.cfg, moe_experts=0).moe_layer_ids() == ()


@pytest.mark.parametrize("overrides, match", [
    ({"model.moe_experts": 4, "model.moe_top_k": 5}, "moe_top_k=5 must lie in"),
    ({"moe.strategy": "npumoe"}, "applies to MoE models"),
    ({"model.moe_experts": 4, "moe.strategy": "npumoe"}, "needs calibrated expert loads"),
    ({"model.moe_experts": 4, "moe.strategy": "uniform", "moe.capacity": 16, "moe.drop": "random"}, "moe.drop"),
    ({"model.moe_experts": 4, "moe.strategy": "uniform", "moe.capacity": 16, "moe.overflow": "spill"},
     "unknown moe.overflow value 'spill'"),
    ({"model.moe_experts": 4, "model.moe_layers": (7,)}, "moe_layers"),
    ({"model.moe_experts": 4, "moe.hot_fraction": 0.0}, "hot_fraction"),
])
def test_config_errors(overrides, match):
    c = apply_overrides(base_config(), overrides)
    with pytest.raises(ConfigError, match=match):
        validate(c)


def test_uniform_with_a_capacity_needs_no_calibration():
    """A fixed moe.capacity is the plan: every expert gets it in every MoE layer, no loads needed. At
    capacity 0 (the calibrated busiest estimate) training without moe.plan is refused, and the run has no
    plans until it calibrates."""
    from edge_jax.papers.npumoe.config import needs_calibration
    from edge_jax.papers.npumoe.setup import moe_exec
    fixed = apply_overrides(base_config(), {"model.moe_experts": 4, "model.n_layers": 3, "moe.strategy": "uniform",
                                            "moe.capacity": 8, "moe.group": 2})
    validate(fixed)
    assert not needs_calibration(fixed)
    assert moe_exec(fixed).plans == (uniform_plan(4, 8, 2),) * 3
    assert moe_exec(fixed).plans[0] == LayerPlan((8, 8, 8, 8), ((0, 1), (2, 3)))
    calibrated = apply_overrides(fixed, {"moe.capacity": 0})
    assert needs_calibration(calibrated) and moe_exec(calibrated).plans == ()
    with pytest.raises(ConfigError, match="needs calibrated expert loads"):
        validate(calibrated)
    validate(apply_overrides(calibrated, {"moe.plan": "calibration.json"}))  # the loads come from the plan file


@requires_devices(8)
def test_paper_preset_phimoe_counts_and_step_traces_abstractly():
    """PhiMoE (NPUMoE's main model): 41.9B parameters; one training step lowers on a 4 x 2 mesh."""
    from edge_jax.config import load_config
    from edge_jax.models.count import param_breakdown
    from edge_jax.sharding import make_mesh
    from edge_jax.train.optim import make_optimizer
    from edge_jax.train.setup import model_config
    from edge_jax.train.state import abstract_train_state
    from edge_jax.train.step import make_train_step
    cfg = load_config("configs/npumoe.py:size=paper", {"mesh.data": 1, "mesh.fsdp": 4, "mesh.tensor": 2,
                                                         "data.batch_size": 8, "data.seq_len": 64})
    model = DecoderLM(model_config(cfg))
    assert abs(param_breakdown(model.cfg)["total"] / 41.9e9 - 1) < 0.03
    tx, schedule = make_optimizer(cfg.train)
    abstract, shardings = abstract_train_state(model, tx, make_mesh(cfg.mesh, jax.devices()[:8]))
    assert tuple(shardings.params["layers_0"]["moe"]["gate"].spec) == (None, "fsdp", "tensor")
    batch = {k: jax.ShapeDtypeStruct((8, 64), jnp.int32) for k in ("inputs", "targets")}
    new_state, metrics = jax.eval_shape(make_train_step(1, schedule), abstract, batch)
    assert metrics["loss"].shape == () and new_state.params["layers_31"]["moe"]["down"].shape == (16, 6400, 4096)


def test_router_renormalize_and_routing_record():
    from edge_jax.layers.moe.layer import MoE
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    for renorm in (False, True):
        layer = MoE(8, 3, 12, renormalize=renorm)
        params = jax.jit(layer.init)(jax.random.key(1), x)
        _, inter = layer.apply(params, x, mutable=["intermediates"])
        r = inter["intermediates"]["routing"][0]
        total = np.asarray(jnp.sum(r["weights"], -1))
        assert np.allclose(total, 1.0, atol=1e-6) == renorm and np.all(total <= 1 + 1e-6)
        assert np.all(np.diff(np.asarray(r["probs"]), axis=-1) <= 0) and r["ids"].shape == (2, 5, 3)
