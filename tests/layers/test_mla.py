"""MLA: latent-cache decoding (naive and absorbed) against full-sequence logits, config checks,
PLM-1.8B parameter count, matched-parameter twins."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.config import ConfigError, load_config
from edge_jax.infer import decode as D
from edge_jax.infer.kv_state import value_arrays
from edge_jax.layers.attention.mla import MLAttention, expanded_attention, latent_attention, mla_attention_reference
from edge_jax.models.count import param_breakdown
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.presets import sized_config
from edge_jax.papers.plm.variants import plm_variant

CFG = ModelConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=128,
                  qk_norm=False, ffn="relu2", attention="mla", kv_lora_rank=24, d_rope=8, rope_theta=10_000.0)
TOL = {"float32": 1e-5, "bfloat16": 5e-2}


def _setup(cfg, B=2, T=11, seed=0):
    tokens = jax.random.randint(jax.random.key(seed + 1), (B, T), 0, cfg.vocab_size)
    params = perturbed(jax.jit(DecoderLM(cfg).init)(jax.random.key(seed), tokens), seed)
    return tokens, params


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
@pytest.mark.parametrize("q_lora_rank", [0, 12], ids=["full_q", "q_lora"])
def test_decode_matches_full_sequence_at_every_position(absorb, q_lora_rank):
    cfg = dataclasses.replace(CFG, q_lora_rank=q_lora_rank)
    tokens, params = _setup(cfg)
    full = jax.jit(DecoderLM(cfg).apply)({"params": params}, tokens)
    model = DecoderLM(dataclasses.replace(cfg, mla_absorb=absorb))
    cache = D.init_cache(model, tokens.shape[0], tokens.shape[1])
    logits, cache = D.prefill(model, params, cache, tokens[:, :1])
    got = [logits]
    for t in range(1, tokens.shape[1]):
        logits, cache = D.decode_step(model, params, cache, tokens[:, t:t + 1])
        got.append(logits)
    full = np.asarray(full)  # float32 summation order only: 1e-5 of the logits' scale
    np.testing.assert_allclose(np.stack(got, 1), full, atol=1e-5 * np.abs(full).max(), rtol=0)
    assert int(D.cache_index(cache)) == tokens.shape[1]


def test_prefill_block_then_decode_matches():
    tokens, params = _setup(CFG)
    full = np.asarray(jax.jit(DecoderLM(CFG).apply)({"params": params}, tokens))
    model = DecoderLM(dataclasses.replace(CFG, mla_absorb=True))
    cache = D.init_cache(model, 2, 16)
    logits, cache = D.prefill(model, params, cache, tokens[:, :6])
    np.testing.assert_allclose(np.asarray(logits), full[:, 5], atol=1e-5, rtol=0)
    logits, cache = D.decode_step(model, params, cache, tokens[:, 6:7])
    np.testing.assert_allclose(np.asarray(logits), full[:, 6], atol=1e-5, rtol=0)


def test_cache_holds_only_latent_and_rope_key():
    cache = D.init_cache(DecoderLM(CFG), 3, 20)
    layer = cache[1]
    assert set(value_arrays(layer)) == {"c_kv", "k_rope"}
    assert layer["c_kv"].shape == (3, 20, CFG.kv_lora_rank)
    assert layer["k_rope"].shape == (3, 20, CFG.d_rope)
    assert layer["valid"].shape == (3, 1, 20) and "pos" not in layer  # plain: slot s holds position s
    assert D.cache_length(cache) == 20


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_absorbed_and_expanded_attention_agree(dtype):
    B, T, S, H, K, R, C = 2, 3, 9, 4, 16, 8, 24
    ks = jax.random.split(jax.random.key(3), 6)
    dt = jnp.dtype(dtype)
    args = [jax.random.normal(k, s, dt) for k, s in zip(ks, [(B, T, H, K), (B, T, H, R), (B, S, C), (B, S, R),
                                                               (C, H, K), (C, H, K)])]
    mask = jnp.broadcast_to(jnp.arange(S)[None, None] <= (jnp.arange(T) + S - T)[None, :, None], (B, T, S))
    a, b = (np.asarray(f(*args, mask), np.float32) for f in (latent_attention, expanded_attention))
    scale = np.abs(b).max()
    assert np.abs(a - b).max() / scale < TOL[dtype]


def test_expanded_attention_matches_explicit_loop():
    """eq. 16 written out per head and query (mla_attention_reference, numpy loops)."""
    B, T, H, K, R, C = 1, 5, 2, 4, 2, 6
    ks = jax.random.split(jax.random.key(7), 6)
    qn, qr, lat, kr, wk, wv = (np.asarray(jax.random.normal(k, s)) for k, s in zip(
        ks, [(B, T, H, K), (B, T, H, R), (B, T, C), (B, T, R), (C, H, K), (C, H, K)]))
    mask = np.tril(np.ones((T, T), bool))[None]
    got = np.asarray(expanded_attention(qn, qr, lat, kr, wk, wv, mask))
    np.testing.assert_allclose(got, np.asarray(mla_attention_reference(qn, qr, lat, kr, wk, wv, mask)), atol=1e-5)


def test_mla_params_have_paper_shapes():
    x = jnp.ones((1, 3, 64))
    params = jax.jit(MLAttention(4, 16, 8, 24).init)(jax.random.key(0), x, jnp.arange(3)[None])["params"]
    shapes = {k: jax.tree_util.tree_leaves(v)[0].shape for k, v in jax.tree_util.tree_map(
        lambda p: p, params, is_leaf=lambda p: hasattr(p, "unbox")).items()}
    assert shapes == {"q_proj": (64, 4, 24), "kv_down": (64, 24), "kv_norm": (24,), "k_rope_proj": (64, 8),
                      "k_up": (24, 4, 16), "v_up": (24, 4, 16), "o_proj": (4, 16, 64)}


def test_plm_1p8b_parameter_count_within_3_percent():
    counts = param_breakdown(ModelConfig.from_config(sized_config("plm_1p8b").model))
    assert abs(counts["total"] / 1.83e9 - 1) < 0.03
    assert abs(counts["embedding"] / 0.31e9 - 1) < 0.03
    assert abs(counts["non_embedding"] / 1.51e9 - 1) < 0.03
    assert counts["lm_head"] == 0  # tied


@pytest.mark.parametrize("attention,ffn", [("gqa", "relu2"), ("mha", "relu2"), ("mla", "swiglu"), ("mla", "gelu")])
def test_twins_keep_the_parameter_count(attention, ffn):
    model = sized_config("plm_tiny").model
    ref = param_breakdown(ModelConfig.from_config({**model, "vocab_size": 256}))["non_embedding"]
    twin = param_breakdown(ModelConfig.from_config({**model, **plm_variant(model, attention, ffn),
                                                     "vocab_size": 256}))["non_embedding"]
    assert abs(twin / ref - 1) < 0.01


@pytest.mark.parametrize("override,needle", [
    ({"model.d_rope": 7}, "model.d_rope=7"),
    ({"model.kv_lora_rank": 0}, "model.kv_lora_rank=0"),
    ({"model.qk_norm": True}, "model.qk_norm"),
    ({"model.attention": "mqa"}, "model.attention"),
    ({"model.q_lora_rank": -1}, "model.q_lora_rank"),
])
def test_bad_mla_config_is_one_line(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config("configs/plm.py:size=tiny", override)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_plm_config_args_are_checked():
    with pytest.raises(ConfigError, match="unknown attention 'mqa'"):
        load_config("configs/plm.py:attention=mqa")


def test_arch_search_paper_candidates_match_table_15_sizes():
    """Table 15's #Params (non-embedding, footnote 5) for the seven sandbox candidates."""
    from edge_jax.grid import spec
    table15 = {"no1_L28_d2816": 1.54e9, "no2_L32_d2304": 1.21e9, "no3_L32_d2560": 1.47e9, "no4_L36_d2304": 1.36e9,
               "no5_L40_d2304": 1.51e9, "no6_L36_d2048": 1.55e9, "no7_L32_d2048": 1.54e9}
    grid = spec.load_grid("ablations/plm_arch_search.py", "paper")
    assert list(grid.cells) == list(table15)
    for cell, paper in table15.items():
        cfg = load_config(grid.base, grid.overrides(cell, 0))
        ours = param_breakdown(ModelConfig.from_config(cfg.model))["non_embedding"]
        assert abs(ours / paper - 1) < 0.03, (cell, ours)
