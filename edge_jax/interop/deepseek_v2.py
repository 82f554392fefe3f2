"""Hugging Face DeepSeek-V2 (dense layers) -> ``DecoderLM(attention="mla")`` conversion (config + weights).

Only the multi-head latent attention + dense SwiGLU part of DeepSeek-V2 maps onto ``DecoderLM``: every layer
must be dense (``first_k_dense_replace >= num_hidden_layers``, no MoE), ``v_head_dim == qk_nope_head_dim``
(our ``head_dim``), no biases, default RoPE. Shared helpers (config/rope parsing, float32 upcast) come from
:mod:`edge_jax.interop.qwen3`.

Layouts: HF ``q_proj`` [H*(K+R), D] (or ``q_a_proj`` [r, D] -> ``q_a_layernorm`` -> ``q_b_proj`` [H*(K+R), r]),
``kv_a_proj_with_mqa`` [d_c+R, D] = latent rows then the shared rope-key rows, ``kv_b_proj`` [H*(K+V), d_c]
(per head: K key rows then V value rows), ``o_proj`` [D, H*V]. HF rotates interleaved pairs
(x[2i], x[2i+1]) (complex view); ``apply_rope`` rotates halves (x[i], x[i+R/2]) at the same frequency i, so the
rope output rows of the query and of the rope key are reordered by :func:`_rope_perm` (q.k is unchanged).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from edge_jax.interop.qwen3 import (
    _IGNORED_SUFFIXES,
    _config_dict,
    _rope_settings,
    _to_f32,
    _tree_map,
)
from edge_jax.models.decoder import ModelConfig

_HF_SUBNORM_EPS = 1e-6  # DeepseekV2RMSNorm default: q_a_layernorm / kv_a_layernorm ignore config.rms_norm_eps


def model_config_from_hf(hf_config) -> ModelConfig:
    """ModelConfig for a transformers DeepSeek-V2 config; ValueError (one line) on settings we do not implement."""
    c = _config_dict(hf_config)
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
    theta, rp = _rope_settings(c)
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
    import jax.numpy as jnp

    V, D, H, K, R, C, F = (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank,
                           cfg.d_ff)
    p = next((p for p in ("model.", "") if f"{p}embed_tokens.weight" in state_dict), None)
    if p is None:
        raise ValueError("missing tensor 'model.embed_tokens.weight' (expected shape [vocab_size, hidden_size]); "
                         "not a DeepSeek-V2 state dict?")
    used: set[str] = set()
    perm = _rope_perm(R)

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        key = name if name.startswith("lm_head") else p + name
        if key not in state_dict:
            raise ValueError(f"missing tensor {key!r} (expected shape {list(shape)})")
        got = tuple(int(s) for s in state_dict[key].shape)
        if got != shape:
            raise ValueError(f"tensor {key!r} has shape {list(got)}, expected {list(shape)}")
        used.add(key)
        return _to_f32(state_dict[key])

    def linear(name: str, out: int, inp: int) -> np.ndarray:  # HF [out, in] -> ours [in, out]
        return get(name, (out, inp)).T

    def query_up(name: str, inp: int) -> np.ndarray:  # [in, H*(K+R)] -> [in, H, K+R], rope part reordered
        w = linear(name, H * (K + R), inp).reshape(inp, H, K + R)
        return np.concatenate([w[..., :K], w[..., K:][..., perm]], axis=-1)

    params: dict[str, Any] = {"embed": {"embedding": get("embed_tokens.weight", (V, D))}}
    for i in range(cfg.n_layers):
        L = f"layers.{i}.self_attn."
        if cfg.q_lora_rank:
            r = cfg.q_lora_rank
            attn = {"q_down": {"kernel": linear(L + "q_a_proj.weight", r, D)},
                    "q_norm": {"scale": get(L + "q_a_layernorm.weight", (r,))},
                    "q_up": {"kernel": query_up(L + "q_b_proj.weight", r)}}
        else:
            attn = {"q_proj": {"kernel": query_up(L + "q_proj.weight", D)}}
        kv_a = linear(L + "kv_a_proj_with_mqa.weight", C + R, D)  # [D, C+R]
        kv_b = get(L + "kv_b_proj.weight", (H * 2 * K, C)).reshape(H, 2 * K, C).transpose(2, 0, 1)  # [C, H, 2K]
        attn.update({
            "kv_down": {"kernel": kv_a[:, :C]},
            "kv_norm": {"scale": get(L + "kv_a_layernorm.weight", (C,))},
            "k_rope_proj": {"kernel": kv_a[:, C:][:, perm]},
            "k_up": kv_b[..., :K],
            "v_up": kv_b[..., K:],
            "o_proj": {"kernel": linear(L + "o_proj.weight", D, H * K).reshape(H, K, D)},
        })
        M = f"layers.{i}."
        params[f"layers_{i}"] = {
            "attn_norm": {"scale": get(M + "input_layernorm.weight", (D,))},
            "attn": attn,
            "ffn_norm": {"scale": get(M + "post_attention_layernorm.weight", (D,))},
            "ffn": {"gate": {"kernel": linear(M + "mlp.gate_proj.weight", F, D)},
                    "up": {"kernel": linear(M + "mlp.up_proj.weight", F, D)},
                    "down": {"kernel": linear(M + "mlp.down_proj.weight", D, F)}},
        }
    params["final_norm"] = {"scale": get("norm.weight", (D,))}
    if not cfg.tie_embeddings:
        params["lm_head"] = {"kernel": linear("lm_head.weight", V, D)}
    elif "lm_head.weight" in state_dict:
        used.add("lm_head.weight")  # the tied copy HF's state_dict() still lists

    extra = sorted(k for k in state_dict if k not in used and not k.endswith(_IGNORED_SUFFIXES))
    if extra:
        raise ValueError(f"unexpected tensors not used by DecoderLM ({len(extra)}): {', '.join(extra[:5])}"
                         + (", ..." if len(extra) > 5 else ""))
    return {"params": _tree_map(lambda a: jnp.asarray(np.ascontiguousarray(a), dtype=jnp.float32), params)}


def load_hf_model(model) -> tuple[ModelConfig, dict]:
    """``(cfg, params)`` from an in-memory ``transformers`` DeepSeek-V2 model (e.g. ``DeepseekV2ForCausalLM``)."""
    cfg = model_config_from_hf(model.config)
    return cfg, params_from_hf_state_dict(model.state_dict(), cfg)
