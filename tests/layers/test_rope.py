"""RoPE scalings: inverse frequencies, attention factor and cos/sin against transformers (Llama 3.1,
Phi-3.5-MoE LongRoPE, DeepSeek-V2 YaRN), the default kind bit for bit against the RoPE before
scalings, the float64 reference, the cache join under LongRoPE, MLA's softmax scale, the config
checks and the HF round trip."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import needs_extra

from edge_jax.config import ConfigError, base_config, validate
from edge_jax.interop.families.common import rope_parameters
from edge_jax.interop.family import Unsupported
from edge_jax.interop.rope import rope_hf, rope_keys
from edge_jax.layers.attention import cached as ca
from edge_jax.layers.attention.mla import MLAttention
from edge_jax.layers.rope import Rope, inv_freq_reference, rope_reference
from edge_jax.models.config import ModelConfig

HF = needs_extra("torch", "transformers")
RNG = np.random.default_rng(0)
PHI_SHORT, PHI_LONG = tuple(1 + 0.5 * RNG.random(64)), tuple(1 + 40 * RNG.random(64))
# (HF config class, its kwargs, the rope parameters dict): the realistic settings of each kind (longrope:
# Phi-3.5-MoE's lengths and head width with random factors)
SETTINGS = {
    "llama3": ("LlamaConfig", dict(hidden_size=4096, num_attention_heads=32, head_dim=128,
                                   max_position_embeddings=131072),
               {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "longrope": ("Phi3Config", dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072),
                 {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": list(PHI_SHORT),
                  "long_factor": list(PHI_LONG), "original_max_position_embeddings": 4096}),
    "yarn": ("DeepseekV2Config", dict(hidden_size=512, num_attention_heads=4, qk_rope_head_dim=64, qk_nope_head_dim=128,
                                      max_position_embeddings=163840),
             {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0, "beta_slow": 1.0,
              "mscale": 0.707, "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096}),
    "linear": ("LlamaConfig", dict(hidden_size=512, num_attention_heads=4, max_position_embeddings=8192),
               {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}),
}


def _hf_config(kind, **rope_extra):
    import transformers
    cls, kw, rp = SETTINGS[kind]
    return getattr(transformers, cls)(**kw, rope_parameters={**rp, **rope_extra})


def _ours(c) -> Rope:
    """Our Rope of an HF config, through the converter's key mapping."""
    d = c.to_dict()
    return Rope.of(ModelConfig(**rope_keys(rope_parameters(d), d)))


def _angle_tol(positions, inv_freq):
    """|Δ cos|, |Δ sin| allowed: a few float32 ulps of the angle (inverse frequencies may differ by an ulp)."""
    return 1e-6 + 2.0 ** -21 * np.asarray(positions, np.float64)[..., None] * np.asarray(inv_freq)


def _old_apply_rope(x_BTHK, positions_BT, theta):
    """edge_jax's RoPE before scalings existed, verbatim."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, x_BTHK.shape[-1], 2, dtype=jnp.float32) / x_BTHK.shape[-1]))
    angles_BTk = positions_BT[..., None].astype(jnp.float32) * inv_freq
    cos, sin = jnp.cos(angles_BTk)[:, :, None, :], jnp.sin(angles_BTk)[:, :, None, :]
    x1, x2 = jnp.split(x_BTHK.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x_BTHK.dtype)


@pytest.mark.parametrize("theta,dim,dtype", [(1e4, 8, "float32"), (5e5, 128, "bfloat16"), (1e6, 96, "float32")])
def test_default_is_bit_identical_to_the_rope_before_scalings(theta, dim, dtype):
    x = jax.random.normal(jax.random.key(0), (2, 9, 3, dim), dtype)
    pos = jnp.asarray(RNG.integers(0, 40000, (2, 9)))
    rope = Rope.of(ModelConfig(rope_theta=theta))
    for run in (lambda f: f(), lambda f: jax.jit(f)()):
        np.testing.assert_array_equal(np.asarray(run(lambda: rope.apply(x, pos)), np.float32),
                                      np.asarray(run(lambda: _old_apply_rope(x, pos, theta)), np.float32))


@HF
@pytest.mark.parametrize("kind", sorted(SETTINGS))
def test_inv_freq_and_attention_factor_match_transformers(kind):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    c = _hf_config(kind)
    rope, dim = _ours(c), 64 if kind == "yarn" else 128
    assert rope.scaling == kind
    for long in (False, True) if kind == "longrope" else (False,):
        seq_len = c.rope_parameters["original_max_position_embeddings"] + 1 if long else None
        hf_inv, hf_factor = ROPE_INIT_FUNCTIONS[kind](c, None, seq_len=seq_len)
        for ours in (rope.inv_freq(dim, long), jax.jit(lambda: rope.inv_freq(dim, long))()):
            np.testing.assert_allclose(np.asarray(ours), hf_inv.numpy(), rtol=3e-7, atol=0)
        np.testing.assert_allclose(inv_freq_reference(rope, dim, long), hf_inv.numpy(), rtol=1e-6, atol=0)
        assert rope.cos_sin_factor == pytest.approx(hf_factor, rel=1e-12)
    if kind == "longrope":  # Phi-3.5-MoE: factor = 131072 / 4096, attention factor sqrt(1 + ln 32 / ln 4096)
        assert rope.factor == 32.0 and rope.cos_sin_factor == pytest.approx(1.1902380714238083)


def _positions(lo, hi, shape=(2, 16)):
    return np.sort(RNG.integers(lo, hi, shape), axis=-1)


@HF
def test_llama3_cos_sin_beyond_the_original_length_match_llama_rotary_embedding():
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    c = _hf_config("llama3")
    rope, pos = _ours(c), _positions(8192, 131072)
    cos, sin = LlamaRotaryEmbedding(c)(torch.zeros(1), torch.from_numpy(pos))
    ours = jax.jit(lambda p: rope.cos_sin(p, 128))(pos)
    tol = _angle_tol(pos, rope.inv_freq(128))
    assert np.all(np.abs(np.asarray(ours[0]) - cos[..., :64].numpy()) <= tol)
    assert np.all(np.abs(np.asarray(ours[1]) - sin[..., :64].numpy()) <= tol)


@HF
def test_longrope_cos_sin_match_phi3_and_phimoe_rotary_embeddings():
    """Past the original length both transformers modules switch ``inv_freq`` to the long factors
    (``dynamic_rope_update``); PhiMoE's forward then recomputes the short set (a transformers 5.x quirk),
    so past it we compare cos/sin with Phi-3's module and PhiMoE's switched buffer."""
    import torch
    import transformers
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding
    from transformers.models.phimoe.modeling_phimoe import PhimoeRotaryEmbedding
    _, kw, rp = SETTINGS["longrope"]
    inner = {k: v for k, v in rp.items() if k != "original_max_position_embeddings"}  # Phi-3: at the top level
    phi3 = transformers.Phi3Config(**kw, original_max_position_embeddings=4096, rope_parameters=inner)
    mscale = 1.243163121016122  # Phi-3.5-MoE's short_mscale and long_mscale
    moe = transformers.PhimoeConfig(**kw, rope_parameters={**rp, "short_mscale": mscale, "long_mscale": mscale})
    for c, module in ((phi3, Phi3RotaryEmbedding(phi3)), (moe, PhimoeRotaryEmbedding(moe))):
        rope = _ours(c)
        for lo, hi in ((0, 4096), (4096, 131072)):
            pos = _positions(lo, hi)
            cos, sin = module(torch.zeros(1), torch.from_numpy(pos))
            got = jax.jit(lambda p: rope.cos_sin(p, 128))(pos)
            tol = _angle_tol(pos, rope.inv_freq(128, long=lo > 0))
            if module.__class__ is PhimoeRotaryEmbedding and lo > 0:
                np.testing.assert_allclose(np.asarray(rope.inv_freq(128, long=True)), module.inv_freq.numpy(),
                                           rtol=3e-7)
                assert cos[0, 0, 0] ** 2 + sin[0, 0, 0] ** 2 == pytest.approx(rope.cos_sin_factor ** 2, rel=1e-5)
                continue
            assert np.all(np.abs(np.asarray(got[0]) - cos[..., :64].numpy()) <= tol)
            assert np.all(np.abs(np.asarray(got[1]) - sin[..., :64].numpy()) <= tol)
    assert _ours(moe).cos_sin_factor == mscale


@HF
def test_yarn_cos_sin_and_softmax_scale_match_deepseek_v2():
    import torch
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Attention, DeepseekV2RotaryEmbedding
    c = _hf_config("yarn")
    rope, pos = _ours(c), _positions(4096, 163840)
    freqs_cis = DeepseekV2RotaryEmbedding(c)(torch.zeros(1), torch.from_numpy(pos))
    got = jax.jit(lambda p: rope.cos_sin(p, 64))(pos)
    tol = _angle_tol(pos, rope.inv_freq(64))
    assert np.all(np.abs(np.asarray(got[0]) - freqs_cis.real.numpy()) <= tol)
    assert np.all(np.abs(np.asarray(got[1]) - freqs_cis.imag.numpy()) <= tol)
    hf_scale = DeepseekV2Attention(c, layer_idx=0).scaling
    assert (128 + 64) ** -0.5 * rope.softmax_scale == pytest.approx(hf_scale, rel=1e-12)
    assert rope.softmax_scale == pytest.approx((0.1 * 0.707 * np.log(40) + 1) ** 2)


ROPES = {
    "default": Rope(1e4),
    "linear": Rope(1e4, "linear", factor=4.0),
    "llama3": Rope(5e5, "llama3", factor=8.0, original_max_len=16),
    "longrope": Rope(1e4, "longrope", factor=8.0, original_max_len=16, short_factor=PHI_SHORT[:8],
                     long_factor=PHI_LONG[:8]),
    "yarn": Rope(1e4, "yarn", factor=40.0, original_max_len=16, mscale=1.0, mscale_all_dim=0.5),
}


@pytest.mark.parametrize("kind", sorted(ROPES))
def test_apply_matches_the_float64_reference(kind):
    rope = ROPES[kind]
    x = jax.random.normal(jax.random.key(1), (2, 5, 3, 16))
    for pos in (_positions(0, 16, (2, 5)), _positions(0, 60, (2, 5))):  # LongRoPE: short, then long
        got = jax.jit(rope.apply)(x, pos)
        np.testing.assert_allclose(np.asarray(got), rope_reference(x, pos, rope), atol=2e-5, rtol=0)


def test_longrope_switch_is_traced_from_the_positions():
    rope, x = ROPES["longrope"], jax.random.normal(jax.random.key(2), (1, 3, 2, 16))
    apply = jax.jit(rope.apply)
    for pos, long in (([[0, 5, 15]], False), ([[0, 5, 16]], True)):  # max + 1 > 16 switches
        fixed = jax.jit(lambda x, p: rope.apply(x, p, long))  # noqa: B023
        np.testing.assert_array_equal(apply(x, jnp.asarray(pos)), fixed(x, jnp.asarray(pos)))
    assert not np.allclose(apply(x, jnp.asarray([[0, 5, 15]]))[:, 1], apply(x, jnp.asarray([[0, 5, 16]]))[:, 1])


@pytest.mark.parametrize("kind", ["longrope", "yarn"])
def test_join_cache_under_a_scaling_matches_its_reference(kind):
    """Cached keys are re-rotated at their slots' positions with the chunk's LongRoPE set (chunk past 16)."""
    B, P, G, K, T = 2, 5, 2, 16, 3
    k1, k2, k3, k4 = jax.random.split(jax.random.key(3), 4)
    ctx = {"k": jax.random.normal(k1, (B, P, G, K)), "v": jax.random.normal(k2, (B, P, G, K)),
           "pos": jax.random.randint(k3, (B, G, P), 0, 20), "valid": jnp.ones((B, G, P), bool)}
    new = {"k": jax.random.normal(k4, (B, T, G, K)), "v": jax.random.normal(k1, (B, T, G, K))}
    positions = jnp.broadcast_to(20 + jnp.arange(T), (B, T))
    got, mask, _ = ca.join_cache(ctx, new, positions, ROPES[kind], rotate="k")
    want, want_mask, _ = ca.join_cache_reference(ctx, new, positions, ROPES[kind], rotate="k")
    np.testing.assert_allclose(np.asarray(got["k"]), np.asarray(want["k"]), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(np.asarray(mask), np.asarray(want_mask))


def test_mla_multiplies_its_softmax_scale_under_yarn():
    """YaRN with mscale_all_dim: the same as the query projection scaled by mscale(factor, mscale_all_dim)^2."""
    rope = ROPES["yarn"]
    plain = dataclasses.replace(rope, mscale_all_dim=0.0, mscale=0.0, attention_factor=rope.cos_sin_factor)
    assert plain.softmax_scale == 1.0 and rope.softmax_scale == pytest.approx((0.1 * 0.5 * np.log(40) + 1) ** 2)
    x, pos = jax.random.normal(jax.random.key(4), (2, 7, 32)), jnp.broadcast_to(10 + jnp.arange(7), (2, 7))
    layer = MLAttention(4, 16, 8, 24, rope=rope)
    params = nn.unbox(jax.jit(layer.init)(jax.random.key(5), x, pos)["params"])
    scaled = {**params, "q_proj": {"kernel": params["q_proj"]["kernel"] * rope.softmax_scale}}
    want = MLAttention(4, 16, 8, 24, rope=plain).apply({"params": scaled}, x, pos)
    np.testing.assert_allclose(np.asarray(layer.apply({"params": params}, x, pos)), np.asarray(want), atol=1e-5)


MODEL_KEYS = {
    "default": dict(rope_theta=1e6),
    "linear": dict(rope_scaling="linear", rope_factor=2.0),
    "llama3": dict(rope_scaling="llama3", rope_theta=5e5, rope_factor=8.0, rope_original_max_len=8192),
    "longrope": dict(rope_scaling="longrope", head_dim=16, rope_factor=32.0, rope_original_max_len=4096,
                     rope_short_factor=PHI_SHORT[:8], rope_long_factor=PHI_LONG[:8], rope_attention_factor=1.25),
    "yarn": dict(rope_scaling="yarn", rope_factor=40.0, rope_original_max_len=4096, rope_mscale=0.707,
                 rope_mscale_all_dim=0.707, rope_beta_fast=16.0, rope_truncate=False),
}


@pytest.mark.parametrize("kind", sorted(MODEL_KEYS))
def test_hf_round_trip_gives_the_same_rope(kind):
    cfg = ModelConfig(**MODEL_KEYS[kind])
    rp = rope_hf(cfg)
    assert rp["rope_type"] == kind
    back = ModelConfig(**{**MODEL_KEYS[kind], **rope_keys(rp, {"max_position_embeddings": 1})})
    assert Rope.of(back) == Rope.of(cfg)
    np.testing.assert_array_equal(Rope.of(back).inv_freq(16), Rope.of(cfg).inv_freq(16))


def test_hf_settings_we_do_not_implement_are_refused_in_one_line():
    for rp, word in (({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, "'dynamic'"),
                     ({"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0], "long_factor": [2.0],
                       "short_mscale": 1.1, "long_mscale": 1.3, "original_max_position_embeddings": 8}, "long_mscale")):
        with pytest.raises(Unsupported, match=word) as e:
            rope_keys(rp, {"max_position_embeddings": 64})
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("keys,message", [
    (dict(rope_scaling="yarm"), "did you mean 'yarn'"),
    (dict(rope_scaling="llama3", rope_factor=8.0), "model.rope_original_max_len=0"),
    (dict(rope_scaling="longrope", rope_original_max_len=16, rope_short_factor=(1.0,) * 3,
          rope_long_factor=(1.0,) * 16), r"model.rope_short_factor=<3 values> needs 16 entries"),
    (dict(rope_short_factor=(1.0,)), "applies to longrope only"),
    (dict(rope_scaling="llama3", rope_original_max_len=16, rope_low_freq_factor=4.0), "rope_high_freq_factor"),
    (dict(rope_mscale_all_dim=1.0), "applies to yarn only"),
])
def test_config_checks_name_the_key_and_the_fix(keys, message):
    c = base_config()
    for k, v in keys.items():
        c.model[k] = v
    with pytest.raises(ConfigError, match=message) as e:
        validate(c)
    assert "\n" not in str(e.value)
