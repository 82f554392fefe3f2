"""MoE router kinds against the numpy reference and transformers' own router code; shared experts; keys."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import needs_extra

from edge_jax.config import ConfigError, apply_overrides, base_config, validate
from edge_jax.layers.moe.layer import MoE
from edge_jax.layers.moe.routers import ROUTERS, RouterParams, route_reference

E = 8
CASES = {  # name: (kind, top_k, renormalize, params)
    "softmax": ("softmax", 3, False, RouterParams()),
    "softmax_renorm": ("softmax", 2, True, RouterParams()),
    "softmax_scaled": ("softmax", 2, False, RouterParams(routed_scale=2.5)),
    "sparsemixer": ("sparsemixer", 2, False, RouterParams(jitter_eps=0.01)),
    "sparsemixer_wide": ("sparsemixer", 2, False, RouterParams(jitter_eps=0.3)),
    "group_limited": ("group_limited", 3, False, RouterParams(n_group=4, topk_group=2, routed_scale=16.0)),
    "group_limited_renorm": ("group_limited", 2, True, RouterParams(n_group=2, topk_group=1)),
}


def logits(n=200, e=E, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, e)) * 2 + np.linspace(1, -1, e)).astype(np.float32)


def by_id(ids, w):
    """Each token's (id, weight) pairs sorted by id (HF may return the top-k unsorted)."""
    order = np.argsort(ids, -1)
    return np.take_along_axis(np.asarray(ids), order, -1), np.take_along_axis(np.asarray(w, np.float64), order, -1)


@pytest.mark.parametrize("case", sorted(CASES))
def test_router_matches_the_numpy_reference(case):
    kind, k, renorm, p = CASES[case]
    x = logits()
    r = jax.jit(ROUTERS.get(kind), static_argnums=(1, 2, 3))(jnp.asarray(x)[None], k, renorm, p)
    ids, w = route_reference(x, kind, k, renorm, p)
    assert r.ids.shape == r.weights.shape == r.probs.shape == (1, len(x), k) and r.probs_BTE.shape == (1, len(x), E)
    np.testing.assert_array_equal(np.asarray(r.ids[0]), ids)
    np.testing.assert_allclose(np.asarray(r.weights[0]), w, rtol=1e-5, atol=1e-7)
    soft = np.exp(x - x.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(r.probs[0]), np.take_along_axis(soft, ids, -1), rtol=1e-5, atol=1e-7)
    if kind == "sparsemixer":  # the mask matters: some second weights are 1 (all others masked), some not
        assert np.any(w[:, 1] > 0.999) and np.any(w[:, 1] < 0.9)


def _hf_router(case: str, x: np.ndarray):
    """``(ids, weights)`` of transformers' router for ``case`` on logits ``x`` (identity router weights)."""
    import torch
    import transformers
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
    from transformers.models.olmoe.modeling_olmoe import OlmoeTopKRouter
    from transformers.models.phimoe.modeling_phimoe import sparsemixer
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    kind, k, renorm, p = CASES[case]
    h = torch.from_numpy(x)
    if kind == "sparsemixer":
        w, ids = sparsemixer(h, jitter_eps=p.jitter_eps, training=False, top_k=k)
        return ids.numpy(), w.numpy()
    size = dict(hidden_size=E, num_experts_per_tok=k, num_attention_heads=1, num_key_value_heads=1)
    if kind == "group_limited" or p.routed_scale != 1:
        method = "group_limited_greedy" if kind == "group_limited" else "greedy"
        router = DeepseekV2TopkRouter(transformers.DeepseekV2Config(
            **size, n_routed_experts=E, topk_method=method, n_group=p.n_group, topk_group=p.topk_group,
            routed_scaling_factor=p.routed_scale))
    elif renorm and k == 2:
        router = MixtralTopKRouter(transformers.MixtralConfig(**size, num_local_experts=E))
    elif renorm:
        router = OlmoeTopKRouter(transformers.OlmoeConfig(**size, num_experts=E, norm_topk_prob=True))
    else:
        router = Qwen3MoeTopKRouter(transformers.Qwen3MoeConfig(**size, num_experts=E, norm_topk_prob=False))
    with torch.no_grad():
        router.weight.copy_(torch.eye(E))
        _, w, ids = router(h)
    return ids.numpy(), w.numpy()


HF_CASES = sorted(set(CASES) - {"group_limited_renorm"})  # transformers' DeepSeek-V2 never renormalises


@needs_extra("torch", "transformers")
@pytest.mark.parametrize("case", HF_CASES)
def test_router_matches_transformers(case):
    kind, k, renorm, p = CASES[case]
    x = logits(seed=3)
    r = ROUTERS.get(kind)(jnp.asarray(x)[None], k, renorm, p)
    ours_ids, ours_w = by_id(r.ids[0], r.weights[0])
    hf_ids, hf_w = by_id(*_hf_router(case, x))
    np.testing.assert_array_equal(ours_ids, hf_ids)
    np.testing.assert_allclose(ours_w, hf_w, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["softmax", "sparsemixer", "group_limited"])
def test_moe_layer_routes_with_its_kind_and_adds_the_shared_expert(kind):
    p = RouterParams(jitter_eps=0.05, n_group=4, topk_group=2, routed_scale=1.5)
    x = jax.random.normal(jax.random.key(0), (2, 5, 16))
    layer = MoE(E, 2, 12, router=kind, router_params=p, shared_d_ff=20)
    params = nn.unbox(jax.jit(layer.init)(jax.random.key(1), x))
    shared = params["params"]["shared"]
    assert {n: shared[n]["kernel"].shape for n in shared} == {"gate": (16, 20), "up": (16, 20), "down": (20, 16)}
    y, inter = layer.apply(params, x, mutable=["intermediates"])
    r = inter["intermediates"]["routing"][0]
    logits_BTE = x @ params["params"]["router"]
    want = ROUTERS.get(kind)(logits_BTE, 2, False, p)
    for key in ("ids", "weights", "probs"):
        np.testing.assert_allclose(np.asarray(r[key]), np.asarray(getattr(want, key)), rtol=1e-6, atol=1e-7)
    no_shared = dataclasses.replace(layer, shared_d_ff=0)
    routed = no_shared.apply({"params": {k: v for k, v in params["params"].items() if k != "shared"}}, x)
    s = {n: np.asarray(shared[n]["kernel"]) for n in shared}
    xn = np.asarray(x)
    a = xn @ s["gate"]
    want_y = np.asarray(routed) + ((a / (1 + np.exp(-a))) * (xn @ s["up"])) @ s["down"]
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)


def _config(**model):
    c = base_config()
    apply_overrides(c, {"model.vocab_size": 64, "model.n_layers": 2, "model.moe_experts": 8, **{
        f"model.{k}": v for k, v in model.items()}})
    return c


@pytest.mark.parametrize("model,match", [
    (dict(moe_router="top1"), "moe_router"),
    (dict(moe_router="sparsemixer", moe_top_k=3), "moe_top_k=2"),
    (dict(moe_router="group_limited", moe_n_group=3), "moe_n_group=3"),
    (dict(moe_router="group_limited", moe_n_group=4, moe_topk_group=5), "moe_topk_group=5"),
    (dict(moe_router="group_limited", moe_n_group=4, moe_topk_group=1, moe_top_k=3), "moe_top_k=3"),
    (dict(moe_shared_d_ff=-1), "moe_shared_d_ff"),
    (dict(moe_routed_scale=0.0), "moe_routed_scale"),
])
def test_router_keys_are_validated_in_one_line(model, match):
    with pytest.raises(ConfigError, match=match) as e:
        validate(_config(**model))
    assert "\n" not in str(e.value)


def test_defaults_route_as_before():
    """The default keys give today's router: softmax, top-k, optional renormalisation, no scale, no shared."""
    validate(_config())
    x = jax.random.normal(jax.random.key(2), (1, 7, 16))
    for renorm in (False, True):
        layer = MoE(E, 3, 12, renormalize=renorm)
        params = nn.unbox(jax.jit(layer.init)(jax.random.key(3), x))
        _, inter = layer.apply(params, x, mutable=["intermediates"])
        r = inter["intermediates"]["routing"][0]
        probs = jax.nn.softmax(x.astype(jnp.float32) @ params["params"]["router"], axis=-1)
        top_p, ids = jax.lax.top_k(probs, 3)
        w = top_p / jnp.sum(top_p, -1, keepdims=True) if renorm else top_p
        assert "shared" not in params["params"]
        assert np.array_equal(r["ids"], ids) and np.array_equal(r["probs"], top_p) and np.array_equal(r["weights"], w)
