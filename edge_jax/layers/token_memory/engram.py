"""Engram: hashed n-gram memory (Cheng et al. 2026, "Conditional memory via scalable lookup"),
the second baseline of MeKi Table 2.

At each chosen layer, before attention, for position ``t`` with residual state ``h_t`` (d_model
``D``) and the ``N = len(orders) * heads`` row ids hashed on the host
(:func:`edge_jax.layers.token_memory.ngram_hash.ngram_hash_ids`)::

    e_t     = concat_i  M[id_{t,i}]                  M: [sum(sizes), d_head] ("ngram", "mem"), ROM
    k_t     = W_k e_t,   v_t = W_v e_t               W_k, W_v: N*d_head -> D, no biases
    s_t     = <RMSNorm_q(h_t), RMSNorm_k(k_t)> / sqrt(D)
    alpha_t = sigmoid( sign(s_t) * sqrt(max(|s_t|, 1e-6)) )     scalar gate per token
    u_t     = alpha_t * v_t
    y_t     = sum_{i<kernel} w_i * RMSNorm_c(u)_{t - i*delta}  depthwise causal conv, w: [kernel, D]
    out_t   = u_t + silu(y_t)                        added to the residual by the decoder

Choices, each following the paper / official demo (``deepseek-ai/Engram`` ``engram_demo_v1.py``)
unless marked *ours*:

* ``sizes``: one distinct prime per (order, head) (:func:`engram_table_sizes`); the per-head tables
  are concatenated into one parameter and the host adds each head's row offset.
* RMSNorms (q, k and the conv's pre-norm) have learned per-feature scales, as everywhere in the
  model. The demo normalises the value before the convolution (``ShortConv``), which we keep.
* The ``sqrt(max(|s|, 1e-6))`` clamp is the demo's; it keeps the gradient of sqrt finite at 0.
* Convolution: width ``kernel`` (default 4), dilation ``delta = max(orders)`` (demo), one weight
  per tap and channel, no bias, zero left-padding (causal). Tap ``w_0`` reads position ``t``.
  *Ours*: ``w`` initialised to zero, so at initialisation the branch is ``out = u`` and the conv
  learns from there (the demo uses PyTorch's default init).
* *Ours*: no biases in W_k / W_v (the repository's convention; the demo's ``nn.Linear`` has them);
  a single hidden stream (the demo's per-hyper-connection keys and norms collapse to one).
* *Ours*: no tokenizer compression (see :mod:`edge_jax.layers.token_memory.ngram_hash`).
* Each Engram layer owns its table but all layers share the same hashed ids (the demo re-hashes per
  layer with layer-specific multipliers; separate tables make that unnecessary here).

ROM: each Engram layer stores ``sum(sizes) * d_head`` values; with ``d_head = d_mem``,
:func:`edge_jax.layers.token_memory.ngram_hash.matched_table_size` picks the ``table_size`` whose total ROM matches
MeKi's / PLE's ``n_layers * vocab_size * d_mem`` (Table 2 compares them at similar ROM).

Params: ``layers_i/engram/{table, key, value, query_norm, key_norm, conv, conv_norm}`` at
``engram_layers``. The ids are the memory kind's host input ``ngram_ids`` [B, T, orders x heads]
(:func:`edge_jax.models.inputs.host_inputs`); the layers differ unless every layer has the branch
(no ``model.scan_layers``), and the KV-cache decoder cannot run the model (the ids and the convolution
look back past the current token).

Causal: ``out_t`` depends on ``h_t`` and on the ids at positions ``<= t`` only (the ids themselves
read tokens ``<= t``).
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.layers.ffn import dense
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.token_memory.base import MEMORY_KINDS, MemoryKind
from edge_jax.layers.token_memory.ngram_hash import engram_table_sizes, ngram_hash_ids
from edge_jax.registry import SECTIONS, Section
from edge_jax.sharding import take_rows


def causal_depthwise_conv(x_BTD, w_conv, dilation: int):
    """``y_t = sum_i w[i] * x_{t - i*dilation}`` with zeros before the start."""
    taps, T = w_conv.shape[0], x_BTD.shape[1]
    pad = (taps - 1) * dilation
    xp = jnp.pad(x_BTD, ((0, 0), (pad, 0), (0, 0)))
    y = jnp.zeros_like(x_BTD)
    for i in range(taps):
        start = pad - i * dilation
        y = y + xp[:, start:start + T] * w_conv[i].astype(x_BTD.dtype)
    return y


class Engram(nn.Module):
    """``(h [B, T, D], ngram_ids [B, T, orders x heads]) -> delta [B, T, D]``."""
    vocab_size: int
    orders: tuple
    heads: int
    table_size: int
    d_head: int
    kernel: int = 4
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, h_BTD, ngram_ids):
        a = (self.init_std, self.dtype, self.param_dtype)
        dt, D = jnp.dtype(self.dtype), h_BTD.shape[-1]
        sizes = engram_table_sizes(self.orders, self.heads, self.table_size)
        n_ids = len(sizes)
        if ngram_ids.shape[-1] != n_ids:
            raise ValueError(f"Engram expects {n_ids} ids per token (orders {tuple(self.orders)} x "
                             f"{self.heads} heads); got {ngram_ids.shape[-1]}")
        table = self.param("table", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                 ("ngram", "mem")),
                           (sum(sizes), self.d_head), jnp.dtype(self.param_dtype))
        e = take_rows(table, ngram_ids).astype(dt)
        e = e.reshape(*e.shape[:-2], n_ids * self.d_head)
        k = dense(D, ("mem", "embed"), "key", *a)(e)
        v = dense(D, ("mem", "embed"), "value", *a)(e)
        q = RMSNorm(self.norm_eps, "norm", self.param_dtype, name="query_norm")(h_BTD)
        kn = RMSNorm(self.norm_eps, "norm", self.param_dtype, name="key_norm")(k)
        s = jnp.sum(q.astype(jnp.float32) * kn.astype(jnp.float32), axis=-1, keepdims=True) / jnp.sqrt(D)
        alpha = nn.sigmoid(jnp.sign(s) * jnp.sqrt(jnp.maximum(jnp.abs(s), 1e-6)))
        u = (alpha * v.astype(jnp.float32)).astype(dt)
        w = self.param("conv", nn.with_logical_partitioning(nn.initializers.zeros, (None, "embed")),
                       (self.kernel, D), jnp.dtype(self.param_dtype))
        c = RMSNorm(self.norm_eps, "norm", self.param_dtype, name="conv_norm")(u)
        y = causal_depthwise_conv(c, w, max(self.orders))
        return u + nn.silu(y)


@dataclasses.dataclass(frozen=True)
class EngramKeys:
    """``model.*`` keys of Engram (``model.memory=engram``; per-head width ``model.d_mem``)."""
    engram_layers: tuple = (1,)  # the layers whose residual gets the Engram branch
    engram_orders: tuple = (2, 3)  # n-gram orders hashed per token
    engram_heads: int = 4  # hash heads per order
    engram_table_size: int = 4099  # rows per head's table (primes near it, edge_jax.layers.token_memory.ngram_hash)
    engram_kernel: int = 4  # the causal depthwise convolution's width


def _validate(c) -> None:
    m = c.model
    if m.memory != "engram":
        return
    bad = [i for i in m.engram_layers if not 0 <= i < m.n_layers]
    if not m.engram_layers or bad:
        raise ConfigError(f"model.engram_layers={tuple(m.engram_layers)} must be non-empty layer indices "
                          f"in [0, {m.n_layers}); e.g. model.engram_layers=[1]")
    if not m.engram_orders or min(m.engram_orders) < 2:
        raise ConfigError(f"model.engram_orders={tuple(m.engram_orders)} must list n-gram orders >= 2, "
                          "e.g. [2,3]")
    if m.engram_heads <= 0 or m.engram_table_size < 2 or m.engram_kernel <= 0:
        raise ConfigError("model.engram_heads, model.engram_kernel must be positive and "
                          "model.engram_table_size >= 2")


def _host_inputs(cfg, tokens_BT) -> dict:
    """The n-gram ids, hashed on the host in int64 (which JAX, int32 by default, should not do)."""
    return {"ngram_ids": ngram_hash_ids(np.asarray(tokens_BT), cfg.engram_orders, cfg.engram_heads,
                                        cfg.engram_table_size)}


def _host_shapes(cfg, batch: int, seq: int) -> dict:
    return {"ngram_ids": ((batch, seq, len(cfg.engram_orders) * cfg.engram_heads), np.int32)}


def _scan_blocker(cfg) -> str | None:
    if set(cfg.engram_layers) != set(range(cfg.n_layers)):
        return f"model.engram_layers={list(cfg.engram_layers)} puts Engram in those layers only"
    return None


def _decode_blocker(cfg) -> str:
    return ("memory=engram's n-gram ids and short convolution look back past the current token, which "
            "the KV cache does not hold")


def _prepare(cfg, ctx: dict) -> None:
    if ctx.get("ngram_ids") is None:
        raise ValueError("memory=engram needs ngram_ids; build them with edge_jax.models.inputs.host_inputs")


def _branch(cfg, layer: int):
    if layer not in cfg.engram_layers:
        return {}

    def apply(h_BTD, ctx):
        return Engram(cfg.vocab_size, cfg.engram_orders, cfg.engram_heads, cfg.engram_table_size, cfg.d_mem,
                      cfg.engram_kernel, cfg.norm_eps, cfg.init_std, cfg.dtype, cfg.param_dtype,
                      name="engram")(h_BTD, ctx["ngram_ids"])
    return {"pre_attn": apply}


SECTIONS.register("engram", Section("model", EngramKeys, _validate))
MEMORY_KINDS.register("engram", MemoryKind(_branch, prepare=_prepare, accepts=("ngram_ids",),
                                           host_inputs=_host_inputs, host_shapes=_host_shapes,
                                           scan_blocker=_scan_blocker, decode_blocker=_decode_blocker))
