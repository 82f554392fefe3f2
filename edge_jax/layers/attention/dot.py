"""The softmax attention core shared by every attention layer (GQA, MLA, EdgeInfinite), and its
loop reference."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np


def causal_mask(q_pos_BT, k_pos_BS):
    """True where query position may attend to key position."""
    return q_pos_BT[:, :, None] >= k_pos_BS[:, None, :]


def dot_product_attention(q_BTHK, k_BSGK, v_BSGK, mask_BTS, return_probs: bool = False):
    """Softmax attention with G key/value heads shared by H/G query heads each (float32 softmax),
    scaled by 1/sqrt(query width); values may be narrower than queries and keys (MLA). The mask is
    [B, T, S] for all groups or [B, G, T, S] per group (caches that keep other tokens per head; G may
    be 1).
    ``return_probs`` also returns the probabilities [B, G, H/G, T, S] (float32)."""
    B, T, H, K = q_BTHK.shape
    G, Kv = k_BSGK.shape[2], v_BSGK.shape[3]
    q_BTGQK = q_BTHK.reshape(B, T, G, H // G, K)
    scores = jnp.einsum("btgqk,bsgk->bgqts", q_BTGQK, k_BSGK, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(K))
    mask = mask_BTS[:, None, None] if mask_BTS.ndim == 3 else mask_BTS[:, :, None]
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = nn.softmax(scores, axis=-1)
    out = jnp.einsum("bgrts,bsgk->btgrk", probs.astype(v_BSGK.dtype), v_BSGK).reshape(B, T, H, Kv)
    return (out, probs) if return_probs else out


def dot_product_attention_reference(q_BTHK, k_BSGK, v_BSGK, mask_BTS, return_probs: bool = False):
    """:func:`dot_product_attention` written out: per row, head and query, a plain softmax over the
    allowed keys in float64 numpy (a fully masked row attends uniformly, as the fast path does)."""
    q, k, v, mask = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (q_BTHK, k_BSGK, v_BSGK, mask_BTS))
    B, T, H, K = q.shape
    S, G, Kv = k.shape[1], k.shape[2], v.shape[3]
    Q = H // G
    if mask.ndim == 4:  # per group, or one row for all groups
        mask = np.broadcast_to(mask, (B, G, T, S))
    out = np.zeros((B, T, H, Kv))
    probs = np.zeros((B, G, Q, T, S))
    for b in range(B):
        for h in range(H):
            g = h // Q
            for t in range(T):
                allowed = (mask[b, t] if mask.ndim == 3 else mask[b, g, t]).astype(bool)
                scores = np.array([q[b, t, h] @ k[b, s, g] for s in range(S)]) / np.sqrt(K)
                scores = np.where(allowed, scores, -np.inf) if allowed.any() else np.zeros(S)
                p = np.exp(scores - scores.max())
                p /= p.sum()
                probs[b, g, h % Q, t] = p
                out[b, t, h] = sum(p[s] * v[b, s, g] for s in range(S))
    out = jnp.asarray(out, jnp.asarray(v_BSGK).dtype)
    return (out, jnp.asarray(probs, jnp.float32)) if return_probs else out
