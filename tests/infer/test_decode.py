"""KV-cache decoding matches the full forward pass, for dense, MeKi (both forms) and host inputs
(``host_fn``; MeKi's host-memory tables are tested in tests/papers/meki/test_host_tables.py)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import random_decoder_params

from edge_jax.infer import decode_step, greedy_decode, init_cache, prefill
from edge_jax.infer.decode import cache_index
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.generate import greedy_generate
from edge_jax.models.inference import inference_form

BASE = ModelConfig(vocab_size=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96)
MEKI = dataclasses.replace(BASE, memory="meki", d_mem=16)
B, S, P = 2, 11, 5  # batch, total tokens, prompt


def tokens(seed=2):
    return jax.random.randint(jax.random.key(seed), (B, S), 1, BASE.vocab_size)


def table_rows_fn(folded, cfg):
    """``host_fn`` giving a folded MeKi model its table rows [B, T, L, d_mem] from outside the model."""
    table_VLM = np.stack([np.asarray(folded[f"layers_{i}"]["meki"]["table"]) for i in range(cfg.n_layers)], axis=1)
    return lambda tokens_BT: {"meki_rows": table_VLM[np.asarray(tokens_BT)]}


def without_tables(folded, cfg):
    return {**folded, **{f"layers_{i}": {**folded[f"layers_{i}"], "meki": {
        k: v for k, v in folded[f"layers_{i}"]["meki"].items() if k != "table"}} for i in range(cfg.n_layers)}}


def assert_cached_matches_full(cfg, params, full_params=None, host_fn=None, prompt_blocks=(P,)):
    """Prefill in ``prompt_blocks``, then one token per step: logits equal the full forward's."""
    model, toks = DecoderLM(cfg), tokens()
    full_BTV = np.asarray(jax.jit(model.apply)({"params": full_params or params}, toks))
    def host(t):
        return None if host_fn is None else host_fn(t)
    cache, start = init_cache(model, B, S), 0
    for n in prompt_blocks:
        logits_BV, cache = prefill(model, params, cache, toks[:, start:start + n], host(toks[:, start:start + n]))
        start += n
        np.testing.assert_allclose(logits_BV, full_BTV[:, start - 1], atol=1e-5, rtol=1e-5)
    for t in range(start, S):
        logits_BV, cache = decode_step(model, params, cache, toks[:, t:t + 1], host(toks[:, t:t + 1]))
        np.testing.assert_allclose(logits_BV, full_BTV[:, t], atol=1e-5, rtol=1e-5, err_msg=f"position {t}")
    assert int(cache_index(cache)) == S


def test_dense_cached_matches_full():
    cache = init_cache(DecoderLM(BASE), B, S)
    layer = cache[1]
    assert layer["k"].shape == layer["v"].shape == (B, S, BASE.n_kv_heads, BASE.head_dim)
    assert int(cache_index(cache)) == 0 and not np.asarray(layer["k"]).any()
    assert_cached_matches_full(BASE, random_decoder_params(BASE))


def test_prefill_in_blocks_and_untied_head():
    cfg = dataclasses.replace(BASE, tie_embeddings=False, qk_norm=False)
    assert_cached_matches_full(cfg, random_decoder_params(cfg), prompt_blocks=(3, 4, 1))


@pytest.mark.parametrize("position", ["parallel_ffn", "parallel_attn", "after_attn", "after_ffn"])
def test_meki_train_form_cached_matches_full(position):
    cfg = dataclasses.replace(MEKI, meki_position=position)
    assert_cached_matches_full(cfg, random_decoder_params(cfg))


@pytest.mark.parametrize("position", ["parallel_ffn", "after_attn"])
def test_meki_folded_and_host_inputs_match_full(position):
    cfg = dataclasses.replace(MEKI, meki_position=position)
    folded, folded_cfg = inference_form(random_decoder_params(cfg), cfg)
    assert_cached_matches_full(folded_cfg, folded)
    assert_cached_matches_full(folded_cfg, without_tables(folded, folded_cfg), full_params=folded,
                               host_fn=table_rows_fn(folded, folded_cfg))


def test_greedy_decode_matches_full_reforward_generation():
    cfg = dataclasses.replace(MEKI, meki_position="parallel_ffn")
    params = random_decoder_params(cfg)
    model, prompt_BT = DecoderLM(cfg), np.asarray(tokens()[:, :4])
    want = greedy_generate(model.apply, params, [list(p) for p in prompt_BT], 6, pad_id=0)
    np.testing.assert_array_equal(greedy_decode(model, params, prompt_BT, 6), np.array(want))
    folded, folded_cfg = inference_form(params, cfg)
    got = greedy_decode(DecoderLM(folded_cfg), without_tables(folded, folded_cfg), prompt_BT, 6,
                        host_fn=table_rows_fn(folded, folded_cfg))
    np.testing.assert_array_equal(got, np.array(want))


def test_a_memory_kinds_decode_blocker_and_overflow_are_one_line_errors():
    model = DecoderLM(dataclasses.replace(BASE, memory="engram", d_mem=8))
    with pytest.raises(ValueError, match="does not support model.memory='engram': .*look back") as e:
        init_cache(model, 1, 8)
    assert "\n" not in str(e.value)
    dense = DecoderLM(BASE)
    with pytest.raises(ValueError, match="exceed the cache length"):
        prefill(dense, random_decoder_params(BASE), init_cache(dense, 1, 4), jnp.ones((1, 5), jnp.int32))
