"""HF DeepSeek-V2 (dense MLA) -> DecoderLM interop: logits parity with a random tiny transformers model."""
import dataclasses
import json

import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402

from edge_jax.interop import deepseek_v2  # noqa: E402
from edge_jax.interop.deepseek_v2 import (  # noqa: E402
    load_hf_model,
    model_config_from_hf,
    params_from_hf_state_dict,
)
from edge_jax.models.decoder import DecoderLM  # noqa: E402

TOL = 1e-4
TINY = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, q_lora_rank=None,
            kv_lora_rank=24, qk_nope_head_dim=16, v_head_dim=16, qk_rope_head_dim=8, intermediate_size=96,
            first_k_dense_replace=2, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10_000.0)


def _hf_config(**kw):
    c = transformers.DeepseekV2Config(**{**TINY, "tie_word_embeddings": False, **kw})
    c._attn_implementation = "eager"
    return c


def _tiny_model(**kw):
    torch.manual_seed(0)
    model = transformers.DeepseekV2ForCausalLM(_hf_config(**kw)).to(torch.float32).eval()
    # Large enough weights that attention is far from uniform (so RoPE layout errors show), and norm weights
    # away from one (so every scale's placement is exercised).
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.3 * torch.randn_like(p) if name.endswith("norm.weight") else 0.2 * torch.randn_like(p))
    return model


def _tokens():
    return np.random.default_rng(1).integers(0, TINY["vocab_size"], size=(2, 10), dtype=np.int64)


def _max_err(model, cfg, params, tokens):
    with torch.no_grad():
        ref = model(torch.from_numpy(tokens)).logits.numpy()
    ours = np.asarray(DecoderLM(cfg).apply(params, tokens.astype(np.int32)))
    assert ours.shape == ref.shape == tokens.shape + (TINY["vocab_size"],)
    return float(np.max(np.abs(ours - ref))), float(np.abs(ref).max())


@pytest.mark.parametrize("tie,q_lora_rank,absorb", [(False, None, False), (True, None, False), (False, 20, False),
                                                     (False, 20, True)])
def test_logits_match_hf(tie, q_lora_rank, absorb):
    model = _tiny_model(tie_word_embeddings=tie, q_lora_rank=q_lora_rank)
    cfg, params = load_hf_model(model)
    assert (cfg.attention, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank, cfg.q_lora_rank, cfg.tie_embeddings) == \
        ("mla", 16, 8, 24, q_lora_rank or 0, tie)
    assert ("lm_head" in params["params"]) is (not tie)
    assert ("q_down" in params["params"]["layers_0"]["attn"]) is bool(q_lora_rank)
    err, scale = _max_err(model, dataclasses.replace(cfg, mla_absorb=absorb), params, _tokens())
    print(f"tie={tie} q_lora_rank={q_lora_rank} absorb={absorb} max|dlogit|={err:.3e} max|logit|={scale:.3f}")
    assert err < TOL, err


def test_rope_layout_matters(monkeypatch):
    """Sanity check of the test itself: without the interleaved -> half-split reorder, logits differ."""
    model = _tiny_model()
    monkeypatch.setattr(deepseek_v2, "_rope_perm", lambda R: np.arange(R))
    err, _ = _max_err(model, *load_hf_model(model), _tokens())
    assert err > 100 * TOL, err


@pytest.mark.parametrize("q_lora_rank", [None, 20])
def test_param_tree_matches_init(q_lora_rank):
    import flax.linen as nn
    import jax
    cfg, params = load_hf_model(_tiny_model(q_lora_rank=q_lora_rank))
    init = nn.unbox(jax.eval_shape(DecoderLM(cfg).init, jax.random.PRNGKey(0), np.zeros((1, 4), np.int32)))
    shapes = lambda t: jax.tree_util.tree_map(lambda a: (a.shape, str(a.dtype)), t)  # noqa: E731
    assert shapes(params) == shapes(init)


def test_wrong_shape_and_extra_tensor_are_one_line_errors():
    model = _tiny_model()
    cfg = model_config_from_hf(model.config)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    key = "model.layers.1.self_attn.kv_b_proj.weight"
    sd[key] = np.zeros((64, 24), np.float32)
    with pytest.raises(ValueError, match=r"kv_b_proj.weight' has shape \[64, 24\], expected \[128, 24\]$"):
        params_from_hf_state_dict(sd, cfg)
    del sd[key]
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.1.self_attn.kv_b_proj.weight'"):
        params_from_hf_state_dict(sd, cfg)
    sd = {**{k: v.numpy() for k, v in model.state_dict().items()}, "model.layers.0.mlp.gate.weight": np.zeros(3)}
    with pytest.raises(ValueError, match=r"unexpected tensors .*mlp.gate.weight"):
        params_from_hf_state_dict(sd, cfg)


def test_config_dict_and_unsupported():
    d = json.loads(json.dumps(_hf_config(q_lora_rank=20).to_dict()))
    cfg = model_config_from_hf(d)
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.rope_theta) == \
        (97, 64, 2, 4, 4, 96, 10_000.0)
    legacy = {k: v for k, v in d.items() if k != "rope_parameters"}
    assert model_config_from_hf({**legacy, "rope_theta": 1e6}).rope_theta == 1e6
    bad = {"first_k_dense_replace": 1, "attention_bias": True, "mlp_bias": True, "v_head_dim": 32,
           "hidden_act": "gelu", "num_key_value_heads": 2, "q_lora_rank": 0, "rms_norm_eps": 1e-5,
           "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}, "model_type": "qwen3"}
    for key, val in bad.items():
        with pytest.raises(ValueError) as ei:
            model_config_from_hf({**d, key: val})
        msg = str(ei.value)
        assert "\n" not in msg and key.split("_")[0] in msg, msg
    with pytest.raises(ValueError, match="rope_type='yarn'"):
        model_config_from_hf({**legacy, "rope_scaling": {"type": "yarn", "factor": 4.0}})
