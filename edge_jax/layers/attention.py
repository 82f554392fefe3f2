"""Grouped-query attention with RoPE and QK-norm (Qwen3 style), plus the plain softmax core.

KV cache (``decode=True``): Flax's mutable ``"cache"`` collection holds ``cached_key`` and
``cached_value`` [B, S, G, K] and ``cache_index`` (int32 scalar, the number of filled slots).
``model.init(..., decode=True)`` with tokens [B, S] creates the zero cache of length S; then each
``apply(..., decode=True, mutable=["cache"])`` writes its T keys/values at slots
``index .. index+T-1`` (a prefill block or one decode token) and attends over the whole buffer, query
``t`` seeing slots ``<= index + t`` (the filled ones up to itself). Slot ``s`` holds the token the
caller gave position ``s``; :mod:`edge_jax.infer.decode` passes ``positions = index + arange(T)``.
Writing past S is not checked here (``dynamic_update_slice`` would clamp); the caller sizes the cache.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.rope import apply_rope


def causal_mask(q_pos_BT, k_pos_BS):
    """True where query position may attend to key position."""
    return q_pos_BT[:, :, None] >= k_pos_BS[:, None, :]


def dot_product_attention(q_BTHK, k_BSGK, v_BSGK, mask_BTS):
    """Softmax attention with G key/value heads shared by H/G query heads each (float32 softmax)."""
    B, T, H, K = q_BTHK.shape
    G = k_BSGK.shape[2]
    q_BTGRK = q_BTHK.reshape(B, T, G, H // G, K)
    scores = jnp.einsum("btgrk,bsgk->bgrts", q_BTGRK, k_BSGK, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(K))
    scores = jnp.where(mask_BTS[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = nn.softmax(scores, axis=-1).astype(v_BSGK.dtype)
    out = jnp.einsum("bgrts,bsgk->btgrk", probs, v_BSGK)
    return out.reshape(B, T, H, K)


def _dense(features, axes, name, std, dtype, param_dtype, in_axes=-1):
    return nn.DenseGeneral(features=features, axis=in_axes, use_bias=False, name=name, dtype=dtype,
                           param_dtype=param_dtype,
                           kernel_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes))


class GQAttention(nn.Module):
    """Projections + RoPE + optional QK-norm around :func:`dot_product_attention`."""
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    qk_norm: bool = True
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    def _cached_kv(self, k_BTGK, v_BTGK):
        """Write this call's keys/values into the cache; return the full buffers and the mask."""
        B, T, G, K = k_BTGK.shape
        initialized = self.has_variable("cache", "cached_key")
        key = self.variable("cache", "cached_key", jnp.zeros, (B, T, G, K), k_BTGK.dtype)
        value = self.variable("cache", "cached_value", jnp.zeros, (B, T, G, K), v_BTGK.dtype)
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if not initialized:  # model.init(decode=True): T is the cache length; plain causal attention
            pos_BT = jnp.broadcast_to(jnp.arange(T), (B, T))
            return k_BTGK, v_BTGK, causal_mask(pos_BT, pos_BT)
        i = index.value
        key.value = jax.lax.dynamic_update_slice(key.value, k_BTGK.astype(key.value.dtype), (0, i, 0, 0))
        value.value = jax.lax.dynamic_update_slice(value.value, v_BTGK.astype(value.value.dtype), (0, i, 0, 0))
        index.value = i + T
        S = key.value.shape[1]
        q_slot_BT = jnp.broadcast_to(i + jnp.arange(T), (B, T))
        k_slot_BS = jnp.broadcast_to(jnp.arange(S), (B, S))
        return key.value, value.value, causal_mask(q_slot_BT, k_slot_BS)

    @nn.compact
    def __call__(self, x_BTD, positions_BT, decode: bool = False):
        H, G, K, std = self.n_heads, self.n_kv_heads, self.head_dim, self.init_std
        dt, pdt = jnp.dtype(self.dtype), jnp.dtype(self.param_dtype)
        q = _dense((H, K), ("embed", "heads", "head_dim"), "q_proj", std, dt, pdt)(x_BTD)
        k = _dense((G, K), ("embed", "kv_heads", "head_dim"), "k_proj", std, dt, pdt)(x_BTD)
        v = _dense((G, K), ("embed", "kv_heads", "head_dim"), "v_proj", std, dt, pdt)(x_BTD)
        if self.qk_norm:
            q = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="q_norm")(q)
            k = RMSNorm(self.norm_eps, "head_dim", self.param_dtype, name="k_norm")(k)
        q = apply_rope(q, positions_BT, self.rope_theta)
        k = apply_rope(k, positions_BT, self.rope_theta)
        if decode:
            k_BSGK, v_BSGK, mask_BTS = self._cached_kv(k, v)
            attn_BTHK = dot_product_attention(q, k_BSGK, v_BSGK, mask_BTS)
        else:
            attn_BTHK = dot_product_attention(q, k, v, causal_mask(positions_BT, positions_BT))
        return _dense(x_BTD.shape[-1], ("heads", "head_dim", "embed"), "o_proj", std, dt, pdt,
                      in_axes=(-2, -1))(attn_BTHK)
