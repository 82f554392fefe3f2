"""Llama (2, 3.x with its ``llama3`` RoPE scaling) and the Mistral checkpoints of the same layout:
GQA without QK-norm, SwiGLU, RMSNorm, no biases."""
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
    refuse(c, "attention_bias", (False,), "Llama's attention has no biases here")
    refuse(c, "mlp_bias", (False,), "the SwiGLU FFN has no biases")
    refuse(c, "pretraining_tp", (1,), "tensor-parallel slicing of the reference implementation")
    return {**decoder_keys(c), "qk_norm": False}


def hf_config(cfg) -> dict:
    refuse_model(cfg, "Llama")
    if cfg.qk_norm:
        raise Unsupported("model.qk_norm=True has no Llama form; export as qwen3")
    return {**decoder_hf_config(cfg, "llama", "LlamaForCausalLM"), "attention_bias": False, "mlp_bias": False}


def tensors(cfg) -> list:
    return layouts.decoder(cfg, layouts.gqa_attention, layouts.dense_ffn)


FAMILIES.register("llama", Family(("llama", "mistral"), "LlamaForCausalLM", model_keys, hf_config, tensors))
