import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.layers.attention.dot import dot_product_attention_reference
from edge_jax.layers.attention.gqa import causal_mask, dot_product_attention
from edge_jax.layers.rope import Rope
from edge_jax.models import DecoderLM, ModelConfig

CFG = ModelConfig(vocab_size=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96)


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 3e-2)])
def test_gqa_matches_naive(dtype, tol):
    ks = jax.random.split(jax.random.key(1), 3)
    q = jax.random.normal(ks[0], (2, 7, 4, 8), dtype)
    k = jax.random.normal(ks[1], (2, 7, 2, 8), dtype)
    v = jax.random.normal(ks[2], (2, 7, 2, 8), dtype)
    pos = jnp.broadcast_to(jnp.arange(7), (2, 7))
    got = np.asarray(dot_product_attention(q, k, v, causal_mask(pos, pos)), np.float64)
    want = dot_product_attention_reference(q, k, v, np.broadcast_to(np.tril(np.ones((7, 7), bool)), (2, 7, 7)))
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < tol


def test_rope_preserves_norm_and_relative_positions():
    x = jax.random.normal(jax.random.key(0), (1, 5, 2, 8))
    pos = jnp.arange(5)[None]
    y = Rope(10_000.0).apply(x, pos)
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)
    # <rope(q, m), rope(k, n)> depends on m - n only
    q, k = x[:, :1], x[:, 1:2]
    dot = lambda m, n: jnp.sum(Rope(1e4).apply(q, jnp.array([[m]])) * Rope(1e4).apply(k, jnp.array([[n]])))  # noqa
    np.testing.assert_allclose(dot(3, 1), dot(7, 5), rtol=1e-4)


def test_decoder_is_causal_and_param_axes_named():
    model = DecoderLM(CFG)
    tokens = jax.random.randint(jax.random.key(0), (2, 12), 1, CFG.vocab_size)
    variables = jax.jit(model.init)(jax.random.key(1), tokens)
    boxed = jax.tree_util.tree_leaves(variables, is_leaf=lambda x: hasattr(x, "names"))
    assert all(hasattr(b, "names") and len(b.names) == b.value.ndim for b in boxed)
    import flax.linen as nn
    params = nn.unbox(variables)
    logits = model.apply(params, tokens)
    changed = tokens.at[:, 8:].set((tokens[:, 8:] + 1) % CFG.vocab_size)
    logits2 = model.apply(params, changed)
    np.testing.assert_allclose(logits[:, :8], logits2[:, :8], atol=1e-6)
    assert not np.allclose(logits[:, 8:], logits2[:, 8:])


def test_untied_head_and_bf16_compute():
    import dataclasses

    import flax.linen as nn
    cfg = dataclasses.replace(CFG, tie_embeddings=False, dtype="bfloat16")
    model = DecoderLM(cfg)
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 1, CFG.vocab_size)
    params = nn.unbox(jax.jit(model.init)(jax.random.key(1), tokens))
    assert "lm_head" in params["params"]
    assert params["params"]["embed"]["embedding"].dtype == jnp.float32
    logits = model.apply(params, tokens)
    assert logits.dtype == jnp.float32 and np.isfinite(np.asarray(logits)).all()
