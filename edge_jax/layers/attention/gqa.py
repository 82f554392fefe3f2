"""Grouped-query attention with RoPE and QK-norm (Qwen3 style).

Without a cache the layer attends causally over its input (EdgeInfinite: in the segmented layout
when the input is long enough to compress). With one (``context``: this layer's explicit KV cache,
:mod:`edge_jax.infer.kv_state`) it attends over the cache and the chunk through
:func:`edge_jax.layers.attention.cached.context_attention` and sows what the cache needs (the chunk's
keys and values, SnapKV votes, the updated memory) into the ``"intermediates"`` collection.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.attention.cached import context_attention
from edge_jax.layers.attention.dot import causal_mask, dot_product_attention
from edge_jax.layers.infini.compressive import MemoryGate, segment_layout
from edge_jax.layers.infini.segmented import InfiniSpec, segmented_attention
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.flash import causal_attention
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.rope import Rope


def dense_general(features, axes, name, std, dtype, param_dtype, in_axes=-1, bias: bool = False):
    """A projection with kernel axes ``axes`` (inputs then outputs); ``bias`` adds ``bias`` over the outputs."""
    n_out = len(features) if isinstance(features, tuple) else 1
    return nn.DenseGeneral(features=features, axis=in_axes, use_bias=bias, name=name, dtype=dtype,
                           param_dtype=param_dtype,
                           kernel_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes),
                           bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[-n_out:]))


class GQAttention(nn.Module):
    """Projections + RoPE + optional QK-norm around :func:`dot_product_attention`.

    ``infini`` (EdgeInfinite) adds the memory-gating module ``memory_gate`` and, for inputs long
    enough to compress, the segmented layout of :mod:`edge_jax.layers.infini.compressive`; shorter inputs take
    the plain path below unchanged, so they give the base model's outputs bit for bit. ``context``
    runs the layer against its explicit cache and memory
    (:func:`edge_jax.layers.attention.cached.context_attention`); what the cache needs is sown into
    the ``"intermediates"`` collection. ``kernels`` (``model.kernels``) may send the plain causal
    path to the backend's library kernel (:mod:`edge_jax.layers.kernels.flash`). ``qkv_bias`` /
    ``o_bias`` add biases to the q/k/v and output projections (``model.qkv_bias`` / ``model.o_bias``).
    """
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope: Rope
    qk_norm: bool = True
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    infini: InfiniSpec | None = None
    kernels: str = "xla"  # model.kernels (edge_jax.layers.kernels.backend)
    qkv_bias: bool = False
    o_bias: bool = False

    @nn.compact
    def __call__(self, x_BTD, positions_BT, context: dict | None = None):
        H, G, K, std = self.n_heads, self.n_kv_heads, self.head_dim, self.init_std
        dt, pdt = jnp.dtype(self.dtype), jnp.dtype(self.param_dtype)
        b = self.qkv_bias
        q = dense_general((H, K), ("embed", "heads", "head_dim"), "q_proj", std, dt, pdt, bias=b)(x_BTD)
        k = dense_general((G, K), ("embed", "kv_heads", "head_dim"), "k_proj", std, dt, pdt, bias=b)(x_BTD)
        v = dense_general((G, K), ("embed", "kv_heads", "head_dim"), "v_proj", std, dt, pdt, bias=b)(x_BTD)
        if self.qk_norm:
            q = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="q_norm")(q)
            k = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="k_norm")(k)
        spec = self.infini
        gate = MemoryGate(H, K, spec.hidden, spec.gate_init, std, name="memory_gate") if spec else None
        layout = segment_layout(x_BTD.shape[1], spec.sink, spec.window, spec.segment) if spec else None
        if context is not None:
            attn_BTHK, extras = context_attention(q, k, v, positions_BT, context, self.rope, spec, gate)
            for name, value in extras.items():
                self.sow("intermediates", name, value)
        elif layout is not None:
            attn_BTHK, state = segmented_attention(q, k, v, layout, self.rope, spec, gate, self.kernels)
            self.sow("intermediates", "infini_state", state)
        else:
            q = self.rope.apply(q, positions_BT)
            k = self.rope.apply(k, positions_BT)
            if backend.use_pallas(self.kernels, "flash"):  # the backend's library kernel
                attn_BTHK = causal_attention(q, k, v)
            else:
                attn_BTHK = dot_product_attention(q, k, v, causal_mask(positions_BT, positions_BT))
            if gate is not None and self.is_initializing():  # create the gate's params
                gate(attn_BTHK, attn_BTHK, False)
        return dense_general(x_BTD.shape[-1], ("heads", "head_dim", "embed"), "o_proj", std, dt, pdt,
                             in_axes=(-2, -1), bias=self.o_bias)(attn_BTHK)
