"""KV-cache decoding matches the full forward pass, for dense, MeKi (both forms) and host tables."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.infer import decode_step, greedy_decode, host_tables, init_cache, prefill
from edge_jax.infer.decode import cache_index
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.fold import fold_meki
from edge_jax.models.generate import greedy_generate

BASE = ModelConfig(vocab_size=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96)
MEKI = dataclasses.replace(BASE, memory="meki", d_mem=16)
B, S, P = 2, 11, 5  # batch, total tokens, prompt


def random_params(cfg, seed=0):
    """Random non-zero parameters (numpy, no compilation): scales, alpha and beta near 1, the rest
    normal with std 0.1."""
    shapes = jax.eval_shape(DecoderLM(cfg).init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    rng = np.random.default_rng(seed)

    def make(path, s):
        near_one = path[-1].key in ("scale", "alpha", "beta")
        return jnp.asarray(near_one + 0.1 * rng.standard_normal(s.shape), s.dtype)

    return jax.tree_util.tree_map_with_path(make, nn.unbox(shapes))


def tokens(seed=2):
    return jax.random.randint(jax.random.key(seed), (B, S), 1, BASE.vocab_size)


def assert_cached_matches_full(cfg, params, full_params=None, rows_fn=None, prompt_blocks=(P,)):
    """Prefill in ``prompt_blocks``, then one token per step: logits equal the full forward's."""
    model, toks = DecoderLM(cfg), tokens()
    full_BTV = np.asarray(jax.jit(model.apply)({"params": full_params or params}, toks))
    extra = (lambda t: {} if rows_fn is None else {"meki_rows": rows_fn(t)})
    cache, start = init_cache(model, B, S), 0
    for n in prompt_blocks:
        logits_BV, cache = prefill(model, params, cache, toks[:, start:start + n], **extra(toks[:, start:start + n]))
        start += n
        np.testing.assert_allclose(logits_BV, full_BTV[:, start - 1], atol=1e-5, rtol=1e-5)
    for t in range(start, S):
        logits_BV, cache = decode_step(model, params, cache, toks[:, t:t + 1], **extra(toks[:, t:t + 1]))
        np.testing.assert_allclose(logits_BV, full_BTV[:, t], atol=1e-5, rtol=1e-5, err_msg=f"position {t}")
    assert int(cache_index(cache)) == S


def test_dense_cached_matches_full():
    cache = init_cache(DecoderLM(BASE), B, S)
    layer = cache[1]
    assert layer["k"].shape == layer["v"].shape == (B, S, BASE.n_kv_heads, BASE.head_dim)
    assert int(cache_index(cache)) == 0 and not np.asarray(layer["k"]).any()
    assert_cached_matches_full(BASE, random_params(BASE))


def test_prefill_in_blocks_and_untied_head():
    cfg = dataclasses.replace(BASE, tie_embeddings=False, qk_norm=False)
    assert_cached_matches_full(cfg, random_params(cfg), prompt_blocks=(3, 4, 1))


@pytest.mark.parametrize("position", ["parallel_ffn", "parallel_attn", "after_attn", "after_ffn"])
def test_meki_train_form_cached_matches_full(position):
    cfg = dataclasses.replace(MEKI, meki_position=position)
    assert_cached_matches_full(cfg, random_params(cfg))


@pytest.mark.parametrize("position", ["parallel_ffn", "after_attn"])
def test_meki_folded_and_host_tables_match_full(position):
    cfg = dataclasses.replace(MEKI, meki_position=position)
    folded, folded_cfg = fold_meki(random_params(cfg), cfg)
    assert_cached_matches_full(folded_cfg, folded)
    host = host_tables(folded, folded_cfg)
    assert "table" not in host.params["layers_0"]["meki"]
    assert host.table_VLM.shape == (BASE.vocab_size, BASE.n_layers, 16)
    assert host.bytes_per_token == BASE.n_layers * 16 * 4
    assert_cached_matches_full(folded_cfg, host.params, full_params=folded, rows_fn=host.gather)


def test_greedy_decode_matches_full_reforward_generation():
    cfg = dataclasses.replace(MEKI, meki_position="parallel_ffn")
    params = random_params(cfg)
    model, prompt_BT = DecoderLM(cfg), np.asarray(tokens()[:, :4])
    want = greedy_generate(model.apply, params, [list(p) for p in prompt_BT], 6, pad_id=0)
    np.testing.assert_array_equal(greedy_decode(model, params, prompt_BT, 6), np.array(want))
    folded, folded_cfg = fold_meki(params, cfg)
    host = host_tables(folded, folded_cfg)
    got = greedy_decode(DecoderLM(folded_cfg), host.params, prompt_BT, 6, meki_rows_fn=host.rows)
    np.testing.assert_array_equal(got, np.array(want))


def test_engram_and_overflow_are_one_line_errors():
    model = DecoderLM(dataclasses.replace(BASE, memory="engram", d_mem=8))
    with pytest.raises(ValueError, match="engram") as e:
        init_cache(model, 1, 8)
    assert "\n" not in str(e.value)
    dense = DecoderLM(BASE)
    with pytest.raises(ValueError, match="exceed the cache length"):
        prefill(dense, random_params(BASE), init_cache(dense, 1, 4), jnp.ones((1, 5), jnp.int32))
    with pytest.raises(ValueError, match="folded MeKi"):
        host_tables(random_params(MEKI), MEKI)


def test_meki_decode_benchmark_smoke():
    from edge_jax.papers.meki.bench import VARIANTS, format_report, measure
    base = dataclasses.replace(BASE, vocab_size=128)
    r = measure(base, d_mem=8, batch=1, prompt=4, new_tokens=3, repeats=1)
    assert set(r["tokens_per_s"]) == set(VARIANTS)
    assert all(np.isfinite(v) and v > 0 for v in r["tokens_per_s"].values())
    assert r["bytes_per_token"] == base.n_layers * 8 * 4
    assert "folded/baseline" in format_report(base, 8, r, 1, 4, 3, 1)
