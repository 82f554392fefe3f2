"""Rotary position embeddings (rotate-half convention, as in Llama/Qwen)."""
from __future__ import annotations

import jax.numpy as jnp


def rope_inv_freq(head_dim: int, theta: float):
    return 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))


def apply_rope(x_BTHK, positions_BT, theta: float):
    """Rotate the last axis of ``x`` by angles ``position * inv_freq``; computed in float32."""
    head_dim = x_BTHK.shape[-1]
    angles_BTk = positions_BT[..., None].astype(jnp.float32) * rope_inv_freq(head_dim, theta)
    cos = jnp.cos(angles_BTk)[:, :, None, :]
    sin = jnp.sin(angles_BTk)[:, :, None, :]
    x = x_BTHK.astype(jnp.float32)
    x1, x2 = jnp.split(x, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BTHK.dtype)
