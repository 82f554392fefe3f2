"""Attention kinds (``model.attention``): the registry, each kind's factory, and the keys they read.

- ``gqa``: grouped-query attention with QK-norm (:class:`~edge_jax.layers.attention.GQAttention`;
  MHA when ``n_kv_heads == n_heads``), optionally with EdgeInfinite's compressed memory and gate.
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
from edge_jax.layers.infini.compressive import MEMORY_UPDATES
from edge_jax.layers.infini.segmented import InfiniSpec
from edge_jax.registry import SECTIONS, Registry, Section

ATTENTION_KINDS = Registry("attention kind", key="model.attention")


def infini_spec(cfg) -> InfiniSpec | None:
    """EdgeInfinite's layer settings, or None without the memory gate. The keep switches (Table 2)
    drop the sink or window tokens by setting their count to zero."""
    if cfg.infini_hidden <= 0:
        return None
    return InfiniSpec(cfg.infini_hidden, cfg.infini_gate_init, cfg.infini_sink if cfg.infini_keep_sink else 0,
                      cfg.infini_window if cfg.infini_keep_window else 0, cfg.infini_segment,
                      cfg.infini_update, cfg.infini_eps)


@ATTENTION_KINDS.register("gqa")
def gqa(cfg, **common):
    return GQAttention(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rope_theta, cfg.qk_norm, cfg.norm_eps,
                       infini=infini_spec(cfg), kernels=cfg.kernels, name="attn", **common)


@ATTENTION_KINDS.register("mla")
def mla(cfg, **common):
    return MLAttention(cfg.n_heads, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank, cfg.q_lora_rank, cfg.rope_theta,
                       cfg.mla_absorb, cfg.norm_eps, kernels=cfg.kernels, name="attn", **common)


@dataclasses.dataclass(frozen=True)
class MLAKeys:
    """``model.*`` keys of MLA (``model.attention=mla``)."""
    kv_lora_rank: int = 0  # d_c, the latent width
    q_lora_rank: int = 0  # 0: a full-rank query (PLM)
    d_rope: int = 0  # the shared RoPE key's width
    mla_absorb: bool = False  # decode in the latent space (W_UK into the query, W_UV after)


@dataclasses.dataclass(frozen=True)
class InfiniKeys:
    """``model.*`` keys of EdgeInfinite's memory on GQA: the memory-gating MLP width per head (0: off),
    the initial gate logit, the segmented layout (sink, window, segment tokens), the memory update
    rule and ε; the keep switches drop the sink or window tokens at inference (Table 2)."""
    infini_hidden: int = 0
    infini_gate_init: float = 0.0
    infini_sink: int = 0
    infini_window: int = 0
    infini_segment: int = 0
    infini_update: str = "linear"
    infini_eps: float = 1e-6
    infini_keep_sink: bool = True
    infini_keep_window: bool = True


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


def _validate_infini(c) -> None:
    m = c.model
    if m.infini_hidden < 0:
        raise ConfigError(f"model.infini_hidden={m.infini_hidden} must be >= 0 (0: no EdgeInfinite memory gate)")
    if not m.infini_hidden:
        return
    if m.infini_update not in MEMORY_UPDATES:
        raise ConfigError(f"unknown model.infini_update value {m.infini_update!r}; valid: {', '.join(MEMORY_UPDATES)}")
    if m.attention != "gqa":
        raise ConfigError("EdgeInfinite (model.infini_hidden > 0) needs model.attention=gqa")
    if m.infini_segment <= 0 or m.infini_sink < 0 or m.infini_window < 0:
        raise ConfigError(f"model.infini_segment={m.infini_segment} must be positive and infini_sink, "
                          "infini_window >= 0; set e.g. model.infini_segment=128")
    if m.infini_segment < m.infini_window:
        raise ConfigError(f"model.infini_segment={m.infini_segment} is shorter than model.infini_window="
                          f"{m.infini_window}; use a segment at least as long as the window")


SECTIONS.register("mla", Section("model", MLAKeys, _validate_mla))
SECTIONS.register("infini", Section("model", InfiniKeys, _validate_infini))
