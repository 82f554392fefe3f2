"""EdgeInfinite memory attention (EdgeInfinite §3.1): compressive memory beside softmax attention.

Per key/value head g (queries read the memory of their GQA group), with σ = ELU + 1:

    compress   M_i = M_{i-1} + σ(K)ᵀ V          z_i = z_{i-1} + Σ_j σ(k_j)          (eqs. 5-6)
    delta      M_i = M_{i-1} + σ(K)ᵀ (V − σ(K) M_{i-1} / (σ(K) z_{i-1} + ε))      (Infini-attention)
    readout    A_mem = σ(Q) M_{i-1} / (σ(Q) z_{i-1} + ε)                          (eq. 7)
    gate       Ã_mem = W2 ReLU(W1 A_mem + b1) + b2                                (eq. 8, per head)
               A = sigmoid(g) ⊙ Ã_mem + (1 − sigmoid(g)) ⊙ A_dot                  (eq. 9, g: one per head)

Keys are compressed after RoPE (σ(K^r)), as in the paper. ε makes the readout of an empty memory
zero, but an empty memory is never read: where there is no memory the layer returns A_dot alone
(eq. 10), so it is the base attention exactly.

Segmented layout (Algorithm 1's prefill, and training): a sequence of T >= sink + window + segment
tokens is ``sink`` tokens, O = (T - sink - window) // segment full segments of ``segment`` tokens
(equal chunks: the letter O), and the remaining T - sink - O * segment tokens (at least ``window``).
Sink tokens attend causally among themselves; every segment and the remaining part attend to the sink
tokens and causally to themselves, at positions re-assigned inside that local cache (sink at
0 .. sink-1, the part from ``sink`` on). Segment i reads the memory of segments 1 .. i-1; the
remaining part reads all O.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

MEMORY_UPDATES = ("linear", "delta")


def feature_map(x):
    """σ = ELU + 1 (positive, so the normaliser σ(q)·z stays positive), in float32; written as
    exp(x) for x <= 0 so that very negative inputs stay above zero instead of rounding to 0."""
    x = x.astype(jnp.float32)
    return jnp.where(x > 0, x + 1.0, jnp.exp(jnp.minimum(x, 0.0)))


def memory_update(M_BGKK, z_BGK, k_BTGK, v_BTGK, valid_BT=None, rule: str = "linear", eps: float = 1e-6):
    """Fold the keys/values of one segment (``valid_BT`` marks real tokens) into ``(M, z)``."""
    sk = feature_map(k_BTGK)
    v = v_BTGK.astype(jnp.float32)
    if valid_BT is not None:
        sk = sk * valid_BT[:, :, None, None]
    if rule == "delta":
        num = jnp.einsum("btgk,bgkv->btgv", sk, M_BGKK)
        den = jnp.einsum("btgk,bgk->btg", sk, z_BGK)[..., None] + eps
        v = v - num / den
    elif rule != "linear":
        raise ValueError(f"unknown memory update {rule!r}; valid: {', '.join(MEMORY_UPDATES)}")
    return M_BGKK + jnp.einsum("btgk,btgv->bgkv", sk, v), z_BGK + jnp.sum(sk, axis=1)


def memory_readout(q_BTHK, M_BGKK, z_BGK, eps: float = 1e-6):
    """A_mem [B, T, H, K] for queries of H heads reading the memory of their group (H / G heads each)."""
    B, T, H, K = q_BTHK.shape
    G = M_BGKK.shape[1]
    sq = feature_map(q_BTHK).reshape(B, T, G, H // G, K)
    num = jnp.einsum("btgqk,bgkv->btgqv", sq, M_BGKK)
    den = jnp.einsum("btgqk,bgk->btgq", sq, z_BGK)[..., None] + eps
    return (num / den).reshape(B, T, H, -1)


def memory_update_reference(M_BGKK, z_BGK, k_BTGK, v_BTGK, valid_BT=None, rule: str = "linear", eps: float = 1e-6):
    """:func:`memory_update` token by token in float64 numpy: each real token's σ(k) vᵀ (delta: v less
    the memory's readout of σ(k) before the segment) added to M, σ(k) to z."""
    if rule not in MEMORY_UPDATES:
        raise ValueError(f"unknown memory update {rule!r}; valid: {', '.join(MEMORY_UPDATES)}")
    M0, z0, k, v = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (M_BGKK, z_BGK, k_BTGK, v_BTGK))
    valid = np.ones(k.shape[:2], bool) if valid_BT is None else np.asarray(valid_BT, bool)
    M, z = M0.copy(), z0.copy()
    B, T, G, _ = k.shape
    for b in range(B):
        for g in range(G):
            for t in range(T):
                if not valid[b, t]:
                    continue
                sk = np.where(k[b, t, g] > 0, k[b, t, g] + 1.0, np.exp(np.minimum(k[b, t, g], 0.0)))
                val = v[b, t, g]
                if rule == "delta":
                    val = val - (sk @ M0[b, g]) / (sk @ z0[b, g] + eps)
                M[b, g] += np.outer(sk, val)
                z[b, g] += sk
    return jnp.asarray(M, jnp.float32), jnp.asarray(z, jnp.float32)


def memory_readout_reference(q_BTHK, M_BGKK, z_BGK, eps: float = 1e-6):
    """:func:`memory_readout` query by query in float64 numpy: σ(q) M / (σ(q) z + ε) of head h's group."""
    q, M, z = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (q_BTHK, M_BGKK, z_BGK))
    B, T, H, _ = q.shape
    G = M.shape[1]
    out = np.zeros((B, T, H, M.shape[-1]))
    for b in range(B):
        for t in range(T):
            for h in range(H):
                g = h // (H // G)
                sq = np.where(q[b, t, h] > 0, q[b, t, h] + 1.0, np.exp(np.minimum(q[b, t, h], 0.0)))
                out[b, t, h] = (sq @ M[b, g]) / (sq @ z[b, g] + eps)
    return jnp.asarray(out, jnp.float32)


def empty_memory(batch: int, groups: int, head_dim: int):
    return jnp.zeros((batch, groups, head_dim, head_dim), jnp.float32), jnp.zeros((batch, groups, head_dim),
                                                                                jnp.float32)


class MemoryGate(nn.Module):
    """Eqs. 8-9: a per-head MLP on A_mem and one sigmoid gate scalar per head (params ``w1, b1, w2,
    b2, g``). ``has_memory`` (bool, [] or [B, T]) selects A_dot alone where there is no memory."""
    n_heads: int
    head_dim: int
    hidden: int
    gate_init: float = 0.0
    init_std: float = 0.02

    @nn.compact
    def __call__(self, a_mem_BTHK, a_dot_BTHK, has_memory):
        H, K, F = self.n_heads, self.head_dim, self.hidden
        init = nn.initializers.normal(self.init_std)
        lp = nn.with_logical_partitioning
        w1 = self.param("w1", lp(init, ("heads", "head_dim", None)), (H, K, F), jnp.float32)
        b1 = self.param("b1", lp(nn.initializers.zeros, ("heads", None)), (H, F), jnp.float32)
        w2 = self.param("w2", lp(init, ("heads", None, "head_dim")), (H, F, K), jnp.float32)
        b2 = self.param("b2", lp(nn.initializers.zeros, ("heads", "head_dim")), (H, K), jnp.float32)
        g = self.param("g", lp(nn.initializers.constant(self.gate_init), ("heads",)), (H,), jnp.float32)
        hidden = jax.nn.relu(jnp.einsum("bthk,hkf->bthf", a_mem_BTHK.astype(jnp.float32), w1) + b1)
        a_tilde = jnp.einsum("bthf,hfk->bthk", hidden, w2) + b2
        s = jax.nn.sigmoid(g)[:, None]
        combined = (s * a_tilde + (1.0 - s) * a_dot_BTHK.astype(jnp.float32)).astype(a_dot_BTHK.dtype)
        has = jnp.asarray(has_memory)
        has = has[..., None, None] if has.ndim == 2 else has
        return jnp.where(has, combined, a_dot_BTHK)


@dataclasses.dataclass(frozen=True)
class SegmentLayout:
    """Static split of T tokens into the sink, O = ``n_segments`` full segments and the remaining part
    (module docstring)."""
    total: int
    sink: int
    segment: int
    n_segments: int

    @property
    def remaining(self) -> int:
        return self.total - self.sink - self.n_segments * self.segment

    def local_positions(self):
        """[T] RoPE positions inside each part's local cache (sink first)."""
        S, seg_len, O, rest = self.sink, self.segment, self.n_segments, self.remaining
        local = jnp.arange(seg_len) + S
        return jnp.concatenate([jnp.arange(S), jnp.tile(local, O), jnp.arange(rest) + S]).astype(jnp.int32)


def segment_layout(total: int, sink: int, window: int, segment: int) -> SegmentLayout | None:
    """The layout of a ``total``-token input, or None when it is too short to compress anything.
    At least one token always stays uncompressed (``window`` 0 keeps just the last one)."""
    if total < sink + max(window, 1) + segment:
        return None
    return SegmentLayout(total, sink, segment, (total - sink - max(window, 1)) // segment)
