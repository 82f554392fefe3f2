"""The chunked LM-head loss against its reference (whole logits), the model's head output, the
train step with ``train.loss_chunk`` and its validation."""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.config import ConfigError
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.head import chunked_token_losses, token_losses, vocab_logits
from edge_jax.train.setup import build
from edge_jax.train.state import TrainState
from edge_jax.train.step import batch_token_losses, make_train_step

TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def _reference(h, w, t):
    return token_losses(vocab_logits(h, w), t)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("chunk", [4, 8])
def test_chunked_losses_and_gradients_match_the_whole_logits(dtype, chunk):
    kh, kw, kt = jax.random.split(jax.random.key(3), 3)
    h = jax.random.normal(kh, (3, 16, 24)).astype(dtype)
    w = (0.3 * jax.random.normal(kw, (24, 200))).astype(dtype)
    t = jax.random.randint(kt, (3, 16), 0, 200)
    want = _reference(h, w, t)
    got = chunked_token_losses(h, w, t, chunk)
    assert got.shape == (3, 16) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=TOL[dtype])
    grads = [jax.grad(lambda h, w, f=f: jnp.mean(f(h, w)), argnums=(0, 1))(h, w)
             for f in (lambda h, w: _reference(h, w, t), lambda h, w: chunked_token_losses(h, w, t, chunk))]
    for want_g, got_g in zip(*grads):
        np.testing.assert_allclose(np.asarray(got_g, np.float32), np.asarray(want_g, np.float32),
                                   rtol=TOL[dtype], atol=TOL[dtype] * float(jnp.abs(want_g.astype(jnp.float32)).max()))


def test_a_chunk_that_does_not_divide_the_sequence_is_refused():
    with pytest.raises(ValueError, match="loss chunk 5 does not divide the sequence length 16"):
        chunked_token_losses(jnp.ones((1, 16, 4)), jnp.ones((4, 8)), jnp.zeros((1, 16), jnp.int32), 5)


@pytest.mark.parametrize("tie", [True, False])
def test_the_model_hands_out_its_head(tie):
    """``features_only`` gives (h, W) whose product is exactly the model's logits; the untied head
    keeps its ``lm_head/kernel`` path."""
    cfg = ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
                      tie_embeddings=tie)
    tokens = np.asarray(jax.random.randint(jax.random.key(0), (2, 16), 1, 96), np.int32)
    params = nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(1), tokens))["params"]
    assert ("lm_head" in params) is not tie
    if not tie:
        assert params["lm_head"]["kernel"].shape == (32, 96)
    logits = DecoderLM(cfg).apply({"params": params}, tokens)
    h, w = DecoderLM(cfg).apply({"params": params}, tokens, features_only=True)
    np.testing.assert_array_equal(vocab_logits(h, w), logits)
    bf = dataclasses.replace(cfg, dtype="bfloat16")
    h, w = DecoderLM(bf).apply({"params": params}, tokens, features_only=True)
    assert h.dtype == w.dtype == jnp.bfloat16


def test_training_with_a_chunked_loss_matches_the_whole_loss(tiny_config):
    """Three AdamW steps from the same params, whole and chunked: same losses, same params."""
    plain = tiny_config(**{"train.steps": 3})
    chunked = tiny_config(**{"train.steps": 3, "train.loss_chunk": plain.data.seq_len // 4})
    run = build(plain)
    vocab, B, T = run.config.model.vocab_size, plain.data.batch_size, plain.data.seq_len
    tokens = np.asarray(jax.random.randint(jax.random.key(2), (3, B, T + 1), 0, vocab), np.int32)
    batches = [{"inputs": x[:, :-1], "targets": x[:, 1:]} for x in tokens]
    params = nn.unbox(jax.jit(run.model.init)(jax.random.key(1), batches[0]["inputs"]))["params"]
    out = []
    for config in (plain, chunked):
        state = TrainState.create(apply_fn=run.model.apply, params=params, tx=run.tx)
        step = jax.jit(make_train_step(1, run.schedule, config.train.loss_chunk))
        losses = []
        for batch in batches:
            state, metrics = step(state, batch)
            losses.append(float(metrics["loss"]))
        out.append((losses, state.params))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(out[1][1]), jax.tree_util.tree_leaves(out[0][1])):
        assert np.linalg.norm(a - b) <= 1e-4 * np.linalg.norm(b)  # AdamW magnifies f32 rounding of tiny grads
    whole, _ = batch_token_losses(params, run.model.apply, batches[0])
    assert whole.shape == (B, T)


def test_a_loss_chunk_must_divide_the_sequence(tiny_config):
    with pytest.raises(ConfigError, match=r"train.loss_chunk=7 must be 0 \(off\) or divide data.seq_len"):
        tiny_config(**{"train.loss_chunk": 7})
