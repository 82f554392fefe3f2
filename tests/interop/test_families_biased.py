"""Qwen2 and PhiMoE families (biases, LayerNorm, SparseMixer, LongRoPE) against random tiny transformers
models: logits, PhiMoE's experts per token and layer, export back bit for bit, config keys and refusals."""
import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402
from parity import (  # noqa: E402
    assert_roundtrip,
    greedy_tokens,
    imported,
    max_logit_diff,
    our_apply,
    random_tokens,
    tiny_model,
)

from edge_jax.interop.convert import model_config_from_hf  # noqa: E402
from edge_jax.interop.family import Unsupported  # noqa: E402

TOL = 1e-4
V = 300
TINY = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=96, max_position_embeddings=64, initializer_range=0.05)
PHIMOE = dict(TINY, num_local_experts=4, num_experts_per_tok=2, attention_bias=True, lm_head_bias=True,
              router_jitter_noise=0.01, rms_norm_eps=1e-5)
ORIGINAL = 16  # the LongRoPE cases' original_max_position_embeddings
LONGROPE = dict(rope_type="longrope", rope_theta=10_000.0, short_factor=[1.0 + 0.1 * i for i in range(8)],
                long_factor=[2.0 + 0.7 * i for i in range(8)], short_mscale=1.2, long_mscale=1.2,
                original_max_position_embeddings=ORIGINAL)


def _model(cls, config_cls, base, **kw):
    model = tiny_model(cls, config_cls, **{**base, **kw})
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # biases start at zero; make every one count
        for name, p in model.named_parameters():
            if name.endswith("bias") and "norm" not in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            if name.endswith("router.weight"):  # wider logits: SparseMixer's mask keeps some experts, drops others
                p.mul_(4.0)
    return model


def qwen2(**kw):
    return _model(transformers.Qwen2ForCausalLM, transformers.Qwen2Config, TINY, **kw)


def phimoe(**kw):
    return _model(transformers.PhimoeForCausalLM, transformers.PhimoeConfig, PHIMOE, **kw)


def reference_longrope(model):
    """``model`` with Microsoft's LongRoPE switch: the long factors (and ``long_mscale``) once the longest
    position + 1 passes the original length. transformers 5's PhiMoE keeps the short factors there."""
    rp, dim = model.config.rope_parameters, model.config.hidden_size // model.config.num_attention_heads

    def forward(x, position_ids):
        long = int(position_ids.max()) + 1 > rp["original_max_position_embeddings"]
        factors = torch.tensor(rp["long_factor" if long else "short_factor"], dtype=torch.float32)
        inv_freq = 1.0 / (factors * rp["rope_theta"] ** (torch.arange(0, dim, 2).float() / dim))
        angles = position_ids[..., None].float() * inv_freq
        emb, mscale = torch.cat((angles, angles), -1), rp["long_mscale" if long else "short_mscale"]
        return (emb.cos() * mscale).to(x.dtype), (emb.sin() * mscale).to(x.dtype)

    model.model.rotary_emb.forward = forward
    return model


CASES = {
    "qwen2": lambda: qwen2(tie_word_embeddings=True),
    "qwen2-untied": lambda: qwen2(tie_word_embeddings=False),
    "phimoe": lambda: phimoe(),
    "phimoe-wide_jitter": lambda: phimoe(router_jitter_noise=0.3, attention_bias=False, lm_head_bias=False),
    "phimoe-longrope": lambda: phimoe(rope_parameters=LONGROPE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case):
    """Within the original length for LongRoPE (transformers' own rotary: short factors, ``short_mscale``)."""
    length = ORIGINAL if case.endswith("longrope") else 24
    assert max_logit_diff(CASES[case](), random_tokens(V, length=length)) <= TOL


def test_longrope_past_the_original_length_matches_the_reference():
    model = reference_longrope(phimoe(rope_parameters=LONGROPE))
    assert max_logit_diff(model, random_tokens(V, length=3 * ORIGINAL)) <= TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_gives_back_every_tensor(case):
    assert_roundtrip(CASES[case]())


def _hf_routing(model, tokens) -> dict:
    """``{layer: (ids [N, 2], weights [N, 2])}`` of transformers' SparseMixer routers, in their order."""
    found = {}

    def hook(i):
        return lambda mod, inp, out: found.__setitem__(i, (out[2].numpy(), out[1].numpy()))

    hooks = [m.register_forward_hook(hook(int(name.split(".")[2]))) for name, m in model.named_modules()
             if name.endswith("mlp.router")]
    with torch.no_grad():
        model(torch.from_numpy(tokens))
    for h in hooks:
        h.remove()
    return found


@pytest.mark.parametrize("case", ["phimoe", "phimoe-wide_jitter"])
def test_same_experts_and_weights_as_transformers(case):
    model, tokens = CASES[case](), random_tokens(V)
    _, _, cfg, params = imported(model)
    _, inter = our_apply(cfg, params, tokens, mutable=["intermediates"])
    theirs = _hf_routing(model, tokens)
    assert sorted(theirs) == list(range(cfg.n_layers))
    kept = []
    for i, (ids, weights) in theirs.items():
        routing = inter["intermediates"][f"layers_{i}"]["moe"]["routing"][0]
        np.testing.assert_array_equal(np.asarray(routing["ids"]).reshape(-1, 2), ids)
        np.testing.assert_allclose(np.asarray(routing["weights"]).reshape(-1, 2), weights, atol=1e-5)
        kept.append(weights[:, 0])
    assert np.min(kept) < 0.99  # the mask kept more than one expert somewhere: the weights are exercised


def phi35_moe_config() -> dict:
    """Phi-3.5-MoE-instruct's config.json (transformers 4.x layout), its factor lists shortened to stand-ins."""
    return {"architectures": ["PhiMoEForCausalLM"], "model_type": "phimoe", "attention_bias": True,
            "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 32000, "hidden_act": "silu",
            "hidden_dropout": 0.0, "hidden_size": 4096, "initializer_range": 0.02, "input_jitter_noise": 0.01,
            "intermediate_size": 6400, "lm_head_bias": True, "max_position_embeddings": 131072,
            "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "num_local_experts": 16, "original_max_position_embeddings": 4096, "output_router_logits": False,
            "rms_norm_eps": 1e-5, "rope_scaling": {"type": "longrope", "long_mscale": 1.243163121016122,
                                                   "short_mscale": 1.243163121016122,
                                                   "original_max_position_embeddings": 4096,
                                                   "long_factor": [1.0 + i for i in range(64)],
                                                   "short_factor": [1.0 + 0.01 * i for i in range(64)]},
            "rope_theta": 10000.0, "router_aux_loss_coef": 0.0, "router_jitter_noise": 0.01,
            "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
            "vocab_size": 32064}


def test_phi35_moe_config_keys_and_export():
    _, fam, cfg = model_config_from_hf(phi35_moe_config())
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff) == \
        (32064, 4096, 32, 32, 8, 128, 6400)
    assert (cfg.norm, cfg.norm_eps, cfg.qk_norm, cfg.qkv_bias, cfg.o_bias, cfg.lm_head_bias, cfg.tie_embeddings) == \
        ("layernorm", 1e-5, False, True, True, True, False)
    assert (cfg.moe_experts, cfg.moe_top_k, cfg.moe_router, cfg.moe_jitter_eps, cfg.moe_layer_ids()) == \
        (16, 2, "sparsemixer", 0.01, tuple(range(32)))
    assert (cfg.rope_scaling, cfg.rope_theta, cfg.rope_original_max_len, cfg.rope_factor, cfg.rope_attention_factor) \
        == ("longrope", 10_000.0, 4096, 32.0, 1.243163121016122)
    back = fam.hf_config(cfg)
    assert model_config_from_hf(back)[2] == cfg
    hf = transformers.PhimoeConfig(**{k: v for k, v in back.items() if k not in ("architectures", "model_type")})
    assert hf.rope_parameters["short_mscale"] == hf.rope_parameters["long_mscale"] == 1.243163121016122
    assert (hf.max_position_embeddings, hf.attention_bias, hf.lm_head_bias) == (131072, True, True)


def test_qwen2_config_keys_and_export():
    _, fam, cfg = model_config_from_hf(qwen2().config.to_dict())
    assert (cfg.qkv_bias, cfg.o_bias, cfg.qk_norm, cfg.norm, cfg.lm_head_bias) == (True, False, False, "rmsnorm", False)
    assert model_config_from_hf(fam.hf_config(cfg))[2] == cfg


@pytest.mark.parametrize("key,value,needle", [
    ("num_experts_per_tok", 3, "num_experts_per_tok=3"),
    ("sliding_window", 8, "sliding_window=8"),
    ("hidden_act", "gelu", "hidden_act='gelu'"),
    ("rope_scaling", {"type": "yarn", "factor": 4.0, "short_mscale": 1.0, "long_mscale": 1.0},
     "rope_type='yarn' for PhiMoE"),
])
def test_phimoe_refusals_are_one_line(key, value, needle):
    config = {**phi35_moe_config(), key: value}
    with pytest.raises(Unsupported) as e:
        model_config_from_hf(config)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("family,change,needle", [
    ("phimoe", dict(norm="rmsnorm"), "model.norm='rmsnorm' has no PhiMoE form"),
    ("phimoe", dict(o_bias=False), "one attention_bias"),
    ("phimoe", dict(moe_router="softmax"), "model.moe_router='softmax'"),
    ("qwen2", dict(o_bias=True), "model.o_bias=True has no Qwen2 form"),
    ("llama", dict(lm_head_bias=True), "model.lm_head_bias=True has no Llama form"),
    ("qwen3", dict(norm="layernorm"), "model.norm='layernorm' has no Qwen3 form"),
    ("qwen3_moe", dict(lm_head_bias=True), "model.lm_head_bias=True has no Qwen3-MoE form"),
    ("deepseek_v2", dict(norm="layernorm"), "model.norm='layernorm' has no DeepSeek-V2 form"),
])
def test_export_refuses_what_the_family_has_no_form_of(family, change, needle):
    import dataclasses

    from edge_jax.interop.family import FAMILIES

    _, _, cfg = model_config_from_hf(phi35_moe_config() if family == "phimoe" else qwen2().config.to_dict())
    if family not in ("phimoe", "qwen2"):
        cfg = dataclasses.replace(cfg, qkv_bias=False, qk_norm=family.startswith("qwen3"))
    with pytest.raises(Unsupported) as e:
        FAMILIES.get(family).hf_config(dataclasses.replace(cfg, **change))
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["qwen2", "phimoe"])
def test_greedy_decoding_with_our_kv_cache_matches_generate(case):
    ours, theirs = greedy_tokens(CASES[case](), random_tokens(V, batch=2, length=8))
    np.testing.assert_array_equal(ours, theirs)
