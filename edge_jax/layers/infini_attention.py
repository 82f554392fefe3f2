"""The two ways an attention layer runs beside a compressive memory or an explicit KV cache.

``segmented_attention``: a whole long input at once in EdgeInfinite's segmented layout (training,
and Algorithm 1's prefill). Cost is linear in T: every part attends only to the sink tokens and to
itself, and the memory before each segment comes from a scan over segments.

``context_attention``: a chunk of tokens against an explicit per-layer cache and optional memory
(decoding, EdgeInfinite's compression during decoding, and the KV-cache baselines). The cache keeps
keys before RoPE with a position per slot and per KV group, so a policy can keep different tokens
per head (SnapKV) or re-assign positions inside the cache (StreamingLLM, EdgeInfinite).

Keys and queries arrive before RoPE ([B, T, H|G, K]); both functions return the attention output
[B, T, H, K] before the output projection, plus what a cache needs (see each docstring).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from edge_jax.layers.dot_attention import causal_mask, dot_product_attention
from edge_jax.layers.infini import (
    SegmentLayout,
    empty_memory,
    memory_readout,
    memory_update,
)
from edge_jax.layers.rope import apply_rope


@dataclasses.dataclass(frozen=True)
class InfiniSpec:
    """Static EdgeInfinite settings of a layer: the memory-gating MLP width, the initial gate logit,
    the segmented layout sizes, the memory update rule and ε."""
    hidden: int
    gate_init: float = 0.0
    sink: int = 0
    window: int = 0
    segment: int = 0
    update: str = "linear"
    eps: float = 1e-6


def rope_per_group(x_BPGK, positions_BGP, theta: float):
    """RoPE on cached keys whose slots have their own position in every group."""
    rotate = jax.vmap(lambda x_BPK, p_BP: apply_rope(x_BPK[:, :, None], p_BP, theta)[:, :, 0],
                      in_axes=(2, 1), out_axes=2)
    return rotate(x_BPGK, positions_BGP)


def _local_attention(q_BTHK, k_BTGK, v_BTGK, sink_k_BSGK, sink_v_BSGK):
    """Causal attention of a part over the sink tokens and itself."""
    B, T = q_BTHK.shape[:2]
    S = sink_k_BSGK.shape[1]
    keys = jnp.concatenate([sink_k_BSGK, k_BTGK], axis=1)
    values = jnp.concatenate([sink_v_BSGK, v_BTGK], axis=1)
    q_pos = jnp.broadcast_to(jnp.arange(T) + S, (B, T))
    k_pos = jnp.broadcast_to(jnp.arange(S + T), (B, S + T))
    return dot_product_attention(q_BTHK, keys, values, causal_mask(q_pos, k_pos))


def segmented_attention(q_BTHK, k_BTGK, v_BTGK, layout: SegmentLayout, theta: float, spec: InfiniSpec, gate):
    """``(attention [B, T, H, K], state)``; ``state`` is what Algorithm 1 keeps after prefill: the
    sink and remaining keys (before RoPE) and values, and the memory (M, z) of all N segments."""
    B, T, H, K = q_BTHK.shape
    G = k_BTGK.shape[2]
    S, L, N = layout.sink, layout.segment, layout.n_segments
    pos_BT = jnp.broadcast_to(layout.local_positions(), (B, T))
    q, k = apply_rope(q_BTHK, pos_BT, theta), apply_rope(k_BTGK, pos_BT, theta)
    v = v_BTGK
    sink_k, sink_v = k[:, :S], v[:, :S]
    parts = []
    if S:
        parts.append(dot_product_attention(q[:, :S], sink_k, sink_v, causal_mask(pos_BT[:, :S], pos_BT[:, :S])))

    def per_segment(x):  # [B, N*L, ...] -> [B*N, L, ...]
        return x[:, S:S + N * L].reshape(B * N, L, *x.shape[2:])

    q_seg, k_seg, v_seg = per_segment(q), per_segment(k), per_segment(v)
    rep = lambda x: jnp.repeat(x, N, axis=0)  # noqa: E731 - [B, S, ...] -> [B*N, S, ...]
    dot_seg = _local_attention(q_seg, k_seg, v_seg, rep(sink_k), rep(sink_v))

    def fold(carry, kv):
        M, z = carry
        return memory_update(M, z, kv[0], kv[1], rule=spec.update, eps=spec.eps), carry

    by_segment = lambda x: jnp.moveaxis(x.reshape(B, N, *x.shape[1:]), 1, 0)  # noqa: E731
    (M_N, z_N), (M_before, z_before) = jax.lax.scan(fold, empty_memory(B, G, K), (by_segment(k_seg), by_segment(v_seg)))
    flat = lambda x: jnp.moveaxis(x, 0, 1).reshape(B * N, *x.shape[2:])  # noqa: E731
    mem_seg = memory_readout(q_seg, flat(M_before), flat(z_before), spec.eps)
    has_seg = jnp.broadcast_to((jnp.arange(N) > 0)[None, :, None], (B, N, L)).reshape(B * N, L)
    parts.append(gate(mem_seg, dot_seg, has_seg).reshape(B, N * L, H, -1))

    q_rem, k_rem, v_rem = q[:, S + N * L:], k_BTGK[:, S + N * L:], v[:, S + N * L:]
    dot_rem = _local_attention(q_rem, k[:, S + N * L:], v_rem, sink_k, sink_v)
    parts.append(gate(memory_readout(q_rem, M_N, z_N, spec.eps), dot_rem, True))
    state = {"sink_k": k_BTGK[:, :S], "sink_v": sink_v, "rest_k": k_rem, "rest_v": v_rem, "M": M_N, "z": z_N}
    return jnp.concatenate(parts, axis=1), state


def context_attention(q_BTHK, k_BTGK, v_BTGK, positions_BT, ctx: dict, theta: float, spec: InfiniSpec | None,
                      gate):
    """``(attention [B, T, H, K], extras)`` for a chunk at ``positions_BT`` after a cache.

    ``ctx``: ``k`` / ``v`` [B, P, G, K] cached keys (before RoPE) and values, ``pos`` / ``valid``
    [B, G, P]; optional ``M`` [B, G, K, K], ``z`` [B, G, K] and ``has_memory`` (bool) for EdgeInfinite;
    ``votes`` (static int w > 0) adds the attention of the w queries before ``votes_end`` (default T)
    to every key, summed over them and over each group's query heads ([B, G, P + T], SnapKV's votes); ``compress`` (static
    bool) folds this chunk's keys (after RoPE) into the memory, with ``compress_valid`` [B, T].
    ``extras`` always has the chunk's ``k`` (before RoPE) and ``v``; ``votes``, ``M`` / ``z`` on request.
    """
    B, T = q_BTHK.shape[:2]
    q, k = apply_rope(q_BTHK, positions_BT, theta), apply_rope(k_BTGK, positions_BT, theta)
    P = ctx["k"].shape[1]
    keys = jnp.concatenate([rope_per_group(ctx["k"], ctx["pos"], theta).astype(k.dtype), k], axis=1)
    values = jnp.concatenate([ctx["v"].astype(v_BTGK.dtype), v_BTGK], axis=1)
    G = keys.shape[2]
    prefix = jnp.broadcast_to(ctx["valid"][:, :, None, :], (B, G, T, P))
    own = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, G, T, T))
    mask = jnp.concatenate([prefix, own], axis=-1)
    window = int(ctx.get("votes", 0))
    extras = {"k": k_BTGK, "v": v_BTGK}
    if window:
        out, probs = dot_product_attention(q, keys, values, mask, return_probs=True)
        end = ctx.get("votes_end", T)
        rows_T = ((jnp.arange(T) >= end - window) & (jnp.arange(T) < end)).astype(probs.dtype)
        extras["votes"] = jnp.einsum("bgrts,t->bgs", probs, rows_T)
    else:
        out = dot_product_attention(q, keys, values, mask)
    if "M" in ctx:
        if gate is None:
            raise ValueError("a memory was passed to an attention layer without a memory gate (model.infini_hidden=0)")
        out = gate(memory_readout(q, ctx["M"], ctx["z"], spec.eps), out, ctx["has_memory"])
        if ctx.get("compress"):
            extras["M"], extras["z"] = memory_update(ctx["M"], ctx["z"], k, v_BTGK, ctx.get("compress_valid"),
                                                     rule=spec.update, eps=spec.eps)
    return out, extras
