"""Grouped-query attention with RoPE and QK-norm (Qwen3 style), plus the plain softmax core.

KV cache (``decode=True``): Flax's mutable ``"cache"`` collection holds ``cached_key`` and
``cached_value`` [B, S, G, K] and ``cache_index`` (int32 scalar, the number of filled slots).
``model.init(..., decode=True)`` with tokens [B, S] creates the zero cache of length S; then each
``apply(..., decode=True, mutable=["cache"])`` writes its T keys/values at slots
``index .. index+T-1`` (a prefill block or one decode token) and attends over the whole buffer, query
``t`` seeing slots ``<= index + t`` (the filled ones up to itself). Slot ``s`` holds the token the
caller gave position ``s``; :mod:`edge_jax.infer.decode` passes ``positions = index + arange(T)``.
Writing past S is not checked here (``dynamic_update_slice`` would clamp); the caller sizes the cache.
:func:`write_cache` does the bookkeeping for any attention layer (MLA caches its latents with it).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.layers.dot_attention import causal_mask, dot_product_attention
from edge_jax.layers.infini import MemoryGate, segment_layout
from edge_jax.layers.infini_attention import (
    InfiniSpec,
    context_attention,
    segmented_attention,
)
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.rope import apply_rope


def write_cache(module: nn.Module, **new):
    """Append this call's per-token arrays (each [B, T, ...]) to ``module``'s ``"cache"`` collection.

    Returns the full buffers (same names) and the [B, T, S] causal mask over cache slots. At
    ``model.init(decode=True)`` the buffers are created with length T and the inputs come back as is.
    """
    first = next(iter(new.values()))
    B, T = first.shape[:2]
    initialized = module.has_variable("cache", "cache_index")
    buffers = {name: module.variable("cache", f"cached_{name}", jnp.zeros, a.shape, a.dtype)
               for name, a in new.items()}
    index = module.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
    if not initialized:  # model.init(decode=True): T is the cache length; plain causal attention
        pos_BT = jnp.broadcast_to(jnp.arange(T), (B, T))
        return new, causal_mask(pos_BT, pos_BT)
    i = index.value
    for name, a in new.items():
        buf = buffers[name]
        buf.value = jax.lax.dynamic_update_slice(buf.value, a.astype(buf.value.dtype), (0, i) + (0,) * (a.ndim - 2))
    index.value = i + T
    S = buffers[next(iter(new))].value.shape[1]
    q_slot_BT = jnp.broadcast_to(i + jnp.arange(T), (B, T))
    k_slot_BS = jnp.broadcast_to(jnp.arange(S), (B, S))
    return {name: buf.value for name, buf in buffers.items()}, causal_mask(q_slot_BT, k_slot_BS)


def dense_general(features, axes, name, std, dtype, param_dtype, in_axes=-1):
    return nn.DenseGeneral(features=features, axis=in_axes, use_bias=False, name=name, dtype=dtype,
                           param_dtype=param_dtype,
                           kernel_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes))


class GQAttention(nn.Module):
    """Projections + RoPE + optional QK-norm around :func:`dot_product_attention`.

    ``infini`` (EdgeInfinite) adds the memory-gating module ``memory_gate`` and, for inputs long
    enough to compress, the segmented layout of :mod:`edge_jax.layers.infini`; shorter inputs take
    the plain path below unchanged, so they give the base model's outputs bit for bit. ``context``
    runs the layer against an explicit cache and memory
    (:func:`edge_jax.layers.infini_attention.context_attention`); what a cache needs is sown into
    the ``"intermediates"`` collection.
    """
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    qk_norm: bool = True
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    infini: InfiniSpec | None = None

    @nn.compact
    def __call__(self, x_BTD, positions_BT, decode: bool = False, context: dict | None = None):
        H, G, K, std = self.n_heads, self.n_kv_heads, self.head_dim, self.init_std
        dt, pdt = jnp.dtype(self.dtype), jnp.dtype(self.param_dtype)
        q = dense_general((H, K), ("embed", "heads", "head_dim"), "q_proj", std, dt, pdt)(x_BTD)
        k = dense_general((G, K), ("embed", "kv_heads", "head_dim"), "k_proj", std, dt, pdt)(x_BTD)
        v = dense_general((G, K), ("embed", "kv_heads", "head_dim"), "v_proj", std, dt, pdt)(x_BTD)
        if self.qk_norm:
            q = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="q_norm")(q)
            k = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="k_norm")(k)
        spec = self.infini
        gate = MemoryGate(H, K, spec.hidden, spec.gate_init, std, name="memory_gate") if spec else None
        layout = segment_layout(x_BTD.shape[1], spec.sink, spec.window, spec.segment) if spec else None
        if context is not None:
            attn_BTHK, extras = context_attention(q, k, v, positions_BT, context, self.rope_theta, spec, gate)
            for name, value in extras.items():
                self.sow("intermediates", name, value)
        elif layout is not None and not decode:
            attn_BTHK, state = segmented_attention(q, k, v, layout, self.rope_theta, spec, gate)
            self.sow("intermediates", "infini_state", state)
        else:
            q = apply_rope(q, positions_BT, self.rope_theta)
            k = apply_rope(k, positions_BT, self.rope_theta)
            if decode:
                kv, mask_BTS = write_cache(self, key=k, value=v)
                attn_BTHK = dot_product_attention(q, kv["key"], kv["value"], mask_BTS)
            else:
                attn_BTHK = dot_product_attention(q, k, v, causal_mask(positions_BT, positions_BT))
            if gate is not None and self.is_initializing():  # create the gate's params
                gate(attn_BTHK, attn_BTHK, False)
        return dense_general(x_BTD.shape[-1], ("heads", "head_dim", "embed"), "o_proj", std, dt, pdt,
                             in_axes=(-2, -1))(attn_BTHK)
