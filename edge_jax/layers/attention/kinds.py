"""Attention kinds (``model.attention``): the registry, each kind's factory, and the keys they read.

- ``gqa``: grouped-query attention with QK-norm (:class:`~edge_jax.layers.attention.gqa.GQAttention`;
  MHA when ``n_kv_heads == n_heads``), biases on q/k/v and the output with ``model.qkv_bias`` /
  ``model.o_bias`` (:class:`AttentionBiasKeys`), optionally with EdgeInfinite's compressed memory and gate
  (:class:`~edge_jax.layers.infini.spec.InfiniSpec`, whose fields are the ``model.infini_*`` keys).
- ``mla``: multi-head latent attention (:class:`~edge_jax.layers.attention.mla.MLAttention`; PLM, DeepSeek-V2):
  ``head_dim`` is d_nope and the value width, ``kv_lora_rank`` d_c, ``q_lora_rank`` 0 a full-rank
  query; ``mla_absorb`` decodes in the latent space.

A factory gets the model config and the shared dtype/init arguments and returns the layer's
attention module (named ``attn``). A new kind is one factory and one registration.
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.layers.attention.gqa import GQAttention
from edge_jax.layers.attention.mla import MLAttention
from edge_jax.layers.infini.spec import InfiniSpec
from edge_jax.layers.infini.spec import validate as validate_infini
from edge_jax.layers.rope import Rope
from edge_jax.registry import SECTIONS, Registry, Section

ATTENTION_KINDS = Registry("attention kind", key="model.attention")


@ATTENTION_KINDS.register("gqa")
def gqa(cfg, **common):
    return GQAttention(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, Rope.of(cfg), cfg.qk_norm, cfg.norm_eps,
                       infini=InfiniSpec.of(cfg), kernels=cfg.kernels, qkv_bias=cfg.qkv_bias, o_bias=cfg.o_bias,
                       name="attn", **common)


@ATTENTION_KINDS.register("mla")
def mla(cfg, **common):
    _refuse_bias(cfg)
    return MLAttention(cfg.n_heads, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank, cfg.q_lora_rank, Rope.of(cfg),
                       cfg.mla_absorb, cfg.norm_eps, kernels=cfg.kernels, name="attn", **common)


@dataclasses.dataclass(frozen=True)
class MLAKeys:
    """``model.*`` keys of MLA (``model.attention=mla``)."""
    kv_lora_rank: int = 0  # d_c, the latent width
    q_lora_rank: int = 0  # 0: a full-rank query (PLM)
    d_rope: int = 0  # the shared RoPE key's width
    mla_absorb: bool = False  # decode in the latent space (W_UK into the query, W_UV after)


def _validate_mla(c) -> None:
    m = c.model
    ATTENTION_KINDS.check(m.attention)
    if m.attention != "mla":
        return
    if m.kv_lora_rank <= 0:
        raise ConfigError(f"model.kv_lora_rank={m.kv_lora_rank} (d_c) must be positive with model.attention=mla; "
                          "set e.g. model.kv_lora_rank=64")
    if m.d_rope <= 0 or m.d_rope % 2:
        raise ConfigError(f"model.d_rope={m.d_rope} must be positive and even for RoPE with model.attention=mla; "
                          "set e.g. model.d_rope=16")
    if m.q_lora_rank < 0:
        raise ConfigError(f"model.q_lora_rank={m.q_lora_rank} must be 0 (full-rank query) or positive")
    if m.qk_norm:
        raise ConfigError("model.qk_norm applies to GQA only (MLA normalises its latent); "
                          "set model.qk_norm=false with model.attention=mla")


@dataclasses.dataclass(frozen=True)
class AttentionBiasKeys:
    """``model.*`` keys of the attention projections' biases (GQA only): ``qkv_bias`` on q/k/v
    (Qwen2, Phi-3.5-MoE; params ``attn/{q,k,v}_proj/bias`` [H|G, K]), ``o_bias`` on the output
    projection (``attn/o_proj/bias`` [D])."""
    qkv_bias: bool = False
    o_bias: bool = False


def _refuse_bias(m) -> None:
    if m.attention != "gqa" and (m.qkv_bias or m.o_bias):
        raise ConfigError(f"model.qkv_bias and model.o_bias apply to GQA only; set both false with "
                          f"model.attention={m.attention}")


def _validate_bias(c) -> None:
    _refuse_bias(c.model)


SECTIONS.register("mla", Section("model", MLAKeys, _validate_mla))
SECTIONS.register("attention_bias", Section("model", AttentionBiasKeys, _validate_bias))
SECTIONS.register("infini", Section("model", InfiniSpec, validate_infini))
