"""Qwen3 (dense): GQA with QK-norm, SwiGLU, RMSNorm, no biases."""
from __future__ import annotations

from edge_jax.interop import layouts
from edge_jax.interop.families.common import (
    decoder_hf_config,
    decoder_keys,
    no_sliding_window,
    refuse,
    refuse_model,
    silu_only,
)
from edge_jax.interop.family import FAMILIES, Family, Unsupported


def model_keys(c: dict) -> dict:
    silu_only(c)
    no_sliding_window(c)
    refuse(c, "attention_bias", (False,), "Qwen3 has no attention biases")
    return {**decoder_keys(c), "qk_norm": True}


def hf_config(cfg) -> dict:
    refuse_model(cfg, "Qwen3")
    if not cfg.qk_norm:
        raise Unsupported("model.qk_norm=False has no Qwen3 form (Qwen3 normalises q and k); export as llama")
    return {**decoder_hf_config(cfg, "qwen3", "Qwen3ForCausalLM"), "attention_bias": False}


def tensors(cfg) -> list:
    return layouts.decoder(cfg, layouts.gqa_attention, layouts.dense_ffn)


FAMILIES.register("qwen3", Family(("qwen3",), "Qwen3ForCausalLM", model_keys, hf_config, tensors))
