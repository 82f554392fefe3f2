"""Qwen2 and Qwen2.5 (``model_type`` qwen2): GQA with biases on q, k and v (none on the output), no
QK-norm, SwiGLU, RMSNorm -> ``model.qkv_bias=True``, ``o_bias=False``, ``qk_norm=False``.

Tensors: the Llama layout plus ``self_attn.{q,k,v}_proj.bias`` [H*K | G*K] <-> ``attn/{q,k,v}_proj/bias``
[H|G, K]. A sliding window on some layers (``use_sliding_window``) is refused.
"""
from __future__ import annotations

from edge_jax.interop import layouts
from edge_jax.interop.families.common import (
    decoder_hf_config,
    decoder_keys,
    no_sliding_window,
    refuse_model,
    silu_only,
)
from edge_jax.interop.family import FAMILIES, Family


def model_keys(c: dict) -> dict:
    silu_only(c)
    no_sliding_window(c)
    return {**decoder_keys(c), "qk_norm": False, "qkv_bias": True, "o_bias": False}


def hf_config(cfg) -> dict:
    refuse_model(cfg, "Qwen2", qk_norm=False, qkv_bias=True, moe_experts=0)
    return {**decoder_hf_config(cfg, "qwen2", "Qwen2ForCausalLM"), "use_sliding_window": False}


def tensors(cfg) -> list:
    return layouts.decoder(cfg, layouts.gqa_attention, layouts.dense_ffn)


FAMILIES.register("qwen2", Family(("qwen2",), "Qwen2ForCausalLM", model_keys, hf_config, tensors))
