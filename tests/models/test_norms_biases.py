"""Norm kinds (``model.norm``) and the biases (``model.qkv_bias``, ``o_bias``, ``lm_head_bias``): params,
their effect on the logits, every place logits are made from ``features_only``, and the refusals."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.layers.norms import NORM_KINDS, LayerNorm, make_norm
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.head import chunked_token_losses, split_features, token_losses, vocab_logits
from edge_jax.papers.meki.logit_lens import early_exit_logits
from edge_jax.train.optim import _matrices_only
from edge_jax.train.step import batch_token_losses

TINY = dict(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
BIASED = dict(norm="layernorm", qkv_bias=True, o_bias=True, lm_head_bias=True, qk_norm=False, norm_eps=1e-5)


def _tokens(t=16):
    return np.asarray(jax.random.randint(jax.random.key(0), (2, t), 1, 96), np.int32)


def _randomised(params, seed=5):
    """Every param random (biases and norm offsets included, so each one shows in the output)."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [x + 0.2 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def _init(cfg, tokens):
    return _randomised(nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(1), tokens))["params"])


def test_layernorm_is_torch_layernorm():
    x = np.asarray(jax.random.normal(jax.random.key(2), (3, 5, 16)) * 3 + 1, np.float32)
    scale, bias = np.linspace(0.5, 2, 16, dtype=np.float32), np.linspace(-1, 1, 16, dtype=np.float32)
    got = LayerNorm(1e-5).apply({"params": {"scale": scale, "bias": bias}}, x)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-5, atol=1e-5)
    y = LayerNorm(1e-5).apply({"params": {"scale": scale, "bias": bias}}, x.astype(jnp.bfloat16))
    assert y.dtype == jnp.bfloat16
    assert set(NORM_KINDS.names()) >= {"rmsnorm", "layernorm"}
    assert isinstance(make_norm("layernorm", 1e-5, name="n"), LayerNorm)


def test_defaults_have_no_biases():
    params = nn.unbox(DecoderLM(ModelConfig(**TINY, tie_embeddings=False)).init(jax.random.key(1), _tokens()))
    paths = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)}
    assert not [p for p in paths if "bias" in p]


def test_biased_params_have_their_shapes():
    cfg = ModelConfig(**TINY, **BIASED, tie_embeddings=True)
    p = nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(1), _tokens()))["params"]
    attn = p["layers_0"]["attn"]
    assert attn["q_proj"]["bias"].shape == (4, 8) and attn["k_proj"]["bias"].shape == (2, 8)
    assert attn["v_proj"]["bias"].shape == (2, 8) and attn["o_proj"]["bias"].shape == (32,)
    for norm in (p["layers_0"]["attn_norm"], p["layers_1"]["ffn_norm"], p["final_norm"]):
        assert sorted(norm) == ["bias", "scale"] and norm["bias"].shape == (32,)
    assert sorted(p["lm_head"]) == ["bias"] and p["lm_head"]["bias"].shape == (96,)  # tied: the bias only


@pytest.mark.parametrize("key", ["qkv_bias", "o_bias", "lm_head_bias", "norm"])
def test_each_setting_changes_the_logits(key):
    """Random params with the setting, then the same params with its own part neutral: logits differ."""
    cfg = ModelConfig(**TINY, **BIASED, tie_embeddings=False)
    tokens = _tokens()
    params = _init(cfg, tokens)
    want = jax.jit(DecoderLM(cfg).apply)({"params": params}, tokens)
    zeroed = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if _belongs(jax.tree_util.keystr(path), key) else x, params)
    assert float(jnp.max(jnp.abs(jax.jit(DecoderLM(cfg).apply)({"params": zeroed}, tokens) - want))) > 1e-3


def _belongs(path: str, key: str) -> bool:
    if key == "qkv_bias":
        return any(f"'{p}_proj']['bias" in path for p in "qkv")
    if key == "o_bias":
        return "'o_proj']['bias" in path
    if key == "lm_head_bias":
        return "'lm_head']['bias" in path
    return "norm']['bias" in path


def test_the_lm_head_bias_is_added_to_the_logits():
    cfg = ModelConfig(**TINY, lm_head_bias=True)
    tokens = _tokens()
    params = _init(cfg, tokens)
    no_bias = {**params, "lm_head": {"bias": jnp.zeros(96)}}
    apply = jax.jit(DecoderLM(cfg).apply)
    got = apply({"params": params}, tokens) - apply({"params": no_bias}, tokens)
    np.testing.assert_allclose(got, np.broadcast_to(params["lm_head"]["bias"], got.shape), atol=1e-5)


@pytest.mark.parametrize("tie", [True, False])
def test_features_only_hands_out_the_bias_and_every_consumer_applies_it(tie):
    cfg = ModelConfig(**TINY, **BIASED, tie_embeddings=tie)
    tokens = _tokens()
    params = _init(cfg, tokens)
    model = DecoderLM(cfg)
    logits = jax.jit(model.apply)({"params": params}, tokens)
    out, hidden = model.apply({"params": params}, tokens, features_only=True, return_hidden=True)
    assert len(out) == 3
    h, w, b = split_features(out)
    np.testing.assert_allclose(vocab_logits(h, w, b), logits, atol=1e-5)
    # the chunked loss of the train step, and its whole-logits reference
    targets = np.roll(tokens, -1, axis=1)
    whole = token_losses(logits, targets)
    np.testing.assert_allclose(chunked_token_losses(h, w, targets, 4, b), whole, rtol=1e-5, atol=1e-5)
    batch = {"inputs": tokens, "targets": targets}
    chunked, _ = batch_token_losses(params, model.apply, batch, loss_chunk=8)
    np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)
    # MeKi's logit lens: the last block's output through the final norm and head is the model's output
    np.testing.assert_allclose(early_exit_logits(cfg, params, hidden[-1], w, b), logits, atol=1e-4)
    plain = ModelConfig(**TINY, tie_embeddings=tie)
    out = DecoderLM(plain).apply(DecoderLM(plain).init(jax.random.key(1), tokens), tokens, features_only=True)
    assert len(out) == 2 and split_features(out)[2] is None


def test_the_biases_train_without_weight_decay():
    cfg = ModelConfig(**TINY, **BIASED)
    params = nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(1), _tokens()))["params"]
    mask = _matrices_only(params)
    assert not mask["layers_0"]["attn"]["q_proj"]["bias"] and mask["layers_0"]["attn"]["q_proj"]["kernel"]


@pytest.mark.parametrize("override,needle", [
    ({"model.qkv_bias": True}, "model.qkv_bias and model.o_bias apply to GQA only"),
    ({"model.o_bias": True}, "model.qkv_bias and model.o_bias apply to GQA only"),
])
def test_mla_refuses_attention_biases(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config("configs/plm.py:size=tiny", override)
    assert needle in str(e.value) and "\n" not in str(e.value)
    cfg = ModelConfig(**TINY, attention="mla", kv_lora_rank=16, d_rope=8, qk_norm=False, o_bias=True)
    with pytest.raises(ConfigError, match="apply to GQA only"):
        DecoderLM(cfg).init(jax.random.key(1), _tokens())


def test_an_unknown_norm_is_one_line():
    with pytest.raises(ConfigError) as e:
        load_config("configs/lm.py:size=tiny", {"model.norm": "layer_norm"})
    assert "model.norm value 'layer_norm'" in str(e.value) and "\n" not in str(e.value)
