"""Hugging Face DeepSeek-V2 (dense layers) -> ``DecoderLM(attention="mla")`` conversion (config + weights).

Only the multi-head latent attention + dense SwiGLU part of DeepSeek-V2 maps onto ``DecoderLM``: every layer
must be dense (``first_k_dense_replace >= num_hidden_layers``, no MoE), ``v_head_dim == qk_nope_head_dim``
(our ``head_dim``), no biases, default RoPE. Config parsing, state-dict reading and the decoder
skeleton come from :mod:`edge_jax.interop.hf_state`.

Layouts: HF ``q_proj`` [H*(K+R), D] (or ``q_a_proj`` [r, D] -> ``q_a_layernorm`` -> ``q_b_proj`` [H*(K+R), r]),
``kv_a_proj_with_mqa`` [d_c+R, D] = latent rows then the shared rope-key rows, ``kv_b_proj`` [H*(K+V), d_c]
(per head: K key rows then V value rows), ``o_proj`` [D, H*V]. HF rotates interleaved pairs
(x[2i], x[2i+1]) (complex view); ``apply_rope`` rotates halves (x[i], x[i+R/2]) at the same frequency i, so the
rope output rows of the query and of the rope key are reordered by :func:`_rope_perm` (q.k is unchanged).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from edge_jax.interop.hf_state import (
    StateDictReader,
    config_dict,
    decoder_params,
    rope_settings,
)
from edge_jax.models.decoder import ModelConfig

_HF_SUBNORM_EPS = 1e-6  # DeepseekV2RMSNorm default: q_a_layernorm / kv_a_layernorm ignore config.rms_norm_eps


def model_config_from_hf(hf_config) -> ModelConfig:
    """ModelConfig for a transformers DeepSeek-V2 config; ValueError (one line) on settings we do not implement."""
    c = config_dict(hf_config)
    model_type = c.get("model_type", "deepseek_v2")
    if model_type != "deepseek_v2":
        raise ValueError(f"unsupported model_type={model_type!r}: only 'deepseek_v2' is supported")
    n_layers, n_heads = int(c["num_hidden_layers"]), int(c["num_attention_heads"])
    dense = int(c.get("first_k_dense_replace", 0))
    if dense < n_layers:
        raise ValueError(f"unsupported setting first_k_dense_replace={dense} < num_hidden_layers={n_layers}: "
                         "layers from there on are MoE; DecoderLM only has dense FFNs")
    for flag in ("attention_bias", "mlp_bias"):
        if c.get(flag, False):
            raise ValueError(f"unsupported setting {flag}=True (DecoderLM has no biases)")
    act = c.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"unsupported setting hidden_act={act!r}: only 'silu' (SwiGLU) is supported")
    K, V, R = int(c["qk_nope_head_dim"]), int(c["v_head_dim"]), int(c["qk_rope_head_dim"])
    if V != K:
        raise ValueError(f"unsupported setting v_head_dim={V} != qk_nope_head_dim={K}: "
                         "MLAttention uses one head_dim for the key content part and the value")
    if R <= 0 or R % 2:
        raise ValueError(f"unsupported setting qk_rope_head_dim={R}: must be positive and even")
    n_kv = c.get("num_key_value_heads") or n_heads
    if int(n_kv) != n_heads:
        raise ValueError(f"unsupported setting num_key_value_heads={n_kv} != num_attention_heads={n_heads}")
    q_rank = c.get("q_lora_rank")
    if q_rank is not None and int(q_rank) <= 0:
        raise ValueError(f"unsupported setting q_lora_rank={q_rank}: use None (full-rank query) or a positive rank")
    eps = float(c.get("rms_norm_eps", 1e-6))
    if eps != _HF_SUBNORM_EPS:
        raise ValueError(f"unsupported setting rms_norm_eps={eps}: HF's q_a/kv_a layernorms always use "
                         f"{_HF_SUBNORM_EPS} and DecoderLM has a single norm_eps")
    theta, rp = rope_settings(c)
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"unsupported setting rope_type={rope_type!r}: only default RoPE is supported")
    return ModelConfig(
        vocab_size=int(c["vocab_size"]), d_model=int(c["hidden_size"]), n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_heads, head_dim=K, d_ff=int(c["intermediate_size"]), rope_theta=theta, qk_norm=False,
        tie_embeddings=bool(c.get("tie_word_embeddings", False)), norm_eps=eps, ffn="swiglu", attention="mla",
        kv_lora_rank=int(c["kv_lora_rank"]), q_lora_rank=int(q_rank or 0), d_rope=R,
        dtype="float32", param_dtype="float32")


def _rope_perm(R: int) -> np.ndarray:
    """Our rope dim j takes HF's dim perm[j]: HF pair (2i, 2i+1) becomes our pair (i, i + R/2)."""
    return np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2)])


def params_from_hf_state_dict(state_dict: Mapping[str, Any], cfg: ModelConfig) -> dict:
    """Plain float32 ``{"params": ...}`` tree for ``DecoderLM(cfg)`` from an HF DeepSeek-V2 state dict."""
    D, H, K, R, C = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank
    r = StateDictReader(state_dict, "DeepSeek-V2")
    perm = _rope_perm(R)

    def query_up(name: str, inp: int) -> np.ndarray:  # [in, H*(K+R)] -> [in, H, K+R], rope part reordered
        w = r.linear(name, H * (K + R), inp).reshape(inp, H, K + R)
        return np.concatenate([w[..., :K], w[..., K:][..., perm]], axis=-1)

    def attention(A: str) -> dict:
        if cfg.q_lora_rank:
            q = cfg.q_lora_rank
            attn = {"q_down": {"kernel": r.linear(A + "q_a_proj.weight", q, D)},
                    "q_norm": {"scale": r.get(A + "q_a_layernorm.weight", (q,))},
                    "q_up": {"kernel": query_up(A + "q_b_proj.weight", q)}}
        else:
            attn = {"q_proj": {"kernel": query_up(A + "q_proj.weight", D)}}
        kv_a = r.linear(A + "kv_a_proj_with_mqa.weight", C + R, D)  # [D, C+R]
        kv_b = r.get(A + "kv_b_proj.weight", (H * 2 * K, C)).reshape(H, 2 * K, C).transpose(2, 0, 1)  # [C, H, 2K]
        attn.update({
            "kv_down": {"kernel": kv_a[:, :C]},
            "kv_norm": {"scale": r.get(A + "kv_a_layernorm.weight", (C,))},
            "k_rope_proj": {"kernel": kv_a[:, C:][:, perm]},
            "k_up": kv_b[..., :K],
            "v_up": kv_b[..., K:],
            "o_proj": {"kernel": r.linear(A + "o_proj.weight", D, H * K).reshape(H, K, D)},
        })
        return attn

    return decoder_params(r, cfg, attention)


def load_hf_model(model) -> tuple[ModelConfig, dict]:
    """``(cfg, params)`` from an in-memory ``transformers`` DeepSeek-V2 model (e.g. ``DeepseekV2ForCausalLM``)."""
    cfg = model_config_from_hf(model.config)
    return cfg, params_from_hf_state_dict(model.state_dict(), cfg)
