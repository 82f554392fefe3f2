"""The softmax attention core shared by every attention layer (GQA, MLA, EdgeInfinite)."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


def causal_mask(q_pos_BT, k_pos_BS):
    """True where query position may attend to key position."""
    return q_pos_BT[:, :, None] >= k_pos_BS[:, None, :]


def dot_product_attention(q_BTHK, k_BSGK, v_BSGK, mask_BTS, return_probs: bool = False):
    """Softmax attention with G key/value heads shared by H/G query heads each (float32 softmax),
    scaled by 1/sqrt(query width); values may be narrower than queries and keys (MLA). The mask is
    [B, T, S] for all groups or [B, G, T, S] per group (caches that keep other tokens per head).
    ``return_probs`` also returns the probabilities [B, G, H/G, T, S] (float32)."""
    B, T, H, K = q_BTHK.shape
    G, Kv = k_BSGK.shape[2], v_BSGK.shape[3]
    q_BTGRK = q_BTHK.reshape(B, T, G, H // G, K)
    scores = jnp.einsum("btgrk,bsgk->bgrts", q_BTGRK, k_BSGK, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(K))
    mask = mask_BTS[:, None, None] if mask_BTS.ndim == 3 else mask_BTS[:, :, None]
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = nn.softmax(scores, axis=-1)
    out = jnp.einsum("bgrts,bsgk->btgrk", probs.astype(v_BSGK.dtype), v_BSGK).reshape(B, T, H, Kv)
    return (out, probs) if return_probs else out
