"""EdgeInfinite's segmented attention: a whole long input at once in the segmented layout of
:mod:`edge_jax.layers.infini.compressive` (training, and Algorithm 1's prefill). Cost is linear in T: every part
attends only to the sink tokens and to itself, and the memory before each segment comes from a scan
over segments. :func:`segmented_attention_reference` runs the parts one after the other.

A chunk against an explicit KV cache and memory (decoding, EdgeInfinite's compression during
decoding, the KV-cache baselines) is :func:`edge_jax.layers.attention.cached.context_attention`.

Keys and queries arrive before RoPE ([B, T, H|G, K]); the result is the attention output
[B, T, H, K] before the output projection and the state Algorithm 1 keeps after its prefill.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from edge_jax.layers.attention.dot import causal_mask, dot_product_attention, dot_product_attention_reference
from edge_jax.layers.infini.compressive import (
    SegmentLayout,
    empty_memory,
    memory_readout,
    memory_readout_reference,
    memory_update,
    memory_update_reference,
)
from edge_jax.layers.infini.spec import InfiniSpec
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.segment_attention import segment_attention
from edge_jax.layers.rope import Rope
from edge_jax.sharding import per_shard


def _local_attention(q_BTHK, k_BTGK, v_BTGK, sink_k_BSGK, sink_v_BSGK):
    """Causal attention of a part over the sink tokens and itself."""
    B, T = q_BTHK.shape[:2]
    S = sink_k_BSGK.shape[1]
    keys = jnp.concatenate([sink_k_BSGK, k_BTGK], axis=1)
    values = jnp.concatenate([sink_v_BSGK, v_BTGK], axis=1)
    q_pos = jnp.broadcast_to(jnp.arange(T) + S, (B, T))
    k_pos = jnp.broadcast_to(jnp.arange(S + T), (B, S + T))
    return dot_product_attention(q_BTHK, keys, values, causal_mask(q_pos, k_pos))


def _fused(q_seg, k_seg, v_seg, sink_k_BSGK, sink_v_BSGK, M_seg, z_seg, eps: float):
    """The segment kernel per device on its rows (XLA cannot partition a Pallas call); a row's
    segments stay on the device of its sink. Rows are (batch, segment) pairs, B * O of them (the
    remaining part: B): ``q_seg`` [rows, seg_len, H, K], ``k_seg`` / ``v_seg`` [rows, seg_len, G, K],
    ``M_seg`` [rows, G, K, K], ``z_seg`` [rows, G, K]."""
    rows = ("batch", None, None, None)
    return per_shard(functools.partial(segment_attention, eps=eps), (rows,) * 6 + (("batch", None, None),),
                     (rows, rows))(q_seg, k_seg, v_seg, sink_k_BSGK, sink_v_BSGK, M_seg, z_seg)


def segmented_attention(q_BTHK, k_BTGK, v_BTGK, layout: SegmentLayout, rope: Rope, spec: InfiniSpec, gate,
                        kernels: str = "xla"):
    """``(attention [B, T, H, K], state)``; ``state`` is what Algorithm 1 keeps after prefill: the
    sink and remaining keys (before RoPE) and values, and the memory (M, z) of all O segments.
    ``kernels`` (``model.kernels``): where :func:`~edge_jax.layers.kernels.backend.use_pallas` says so,
    the segments' and the remaining part's local attention and memory readout run as one Pallas kernel
    (:mod:`edge_jax.layers.kernels.segment_attention`); the sink's own attention, the memory scan and
    the gate stay in XLA."""
    fused = backend.use_pallas(kernels, "segment_attention")
    B, T, H, K = q_BTHK.shape
    G = k_BTGK.shape[2]
    S, seg_len, O = layout.sink, layout.segment, layout.n_segments
    pos_BT = jnp.broadcast_to(layout.local_positions(), (B, T))
    q, k = rope.apply(q_BTHK, pos_BT), rope.apply(k_BTGK, pos_BT)
    v = v_BTGK
    sink_k, sink_v = k[:, :S], v[:, :S]
    parts = []
    if S:
        parts.append(dot_product_attention(q[:, :S], sink_k, sink_v, causal_mask(pos_BT[:, :S], pos_BT[:, :S])))

    def per_segment(x):  # [B, O*seg_len, ...] -> [B*O, seg_len, ...]
        return x[:, S:S + O * seg_len].reshape(B * O, seg_len, *x.shape[2:])

    q_seg, k_seg, v_seg = per_segment(q), per_segment(k), per_segment(v)
    rep = lambda x: jnp.repeat(x, O, axis=0)  # noqa: E731 - [B, S, ...] -> [B*O, S, ...]
    if not fused:
        dot_seg = _local_attention(q_seg, k_seg, v_seg, rep(sink_k), rep(sink_v))

    def fold(carry, kv):
        M, z = carry
        return memory_update(M, z, kv[0], kv[1], rule=spec.update, eps=spec.eps), carry

    by_segment = lambda x: jnp.moveaxis(x.reshape(B, O, *x.shape[1:]), 1, 0)  # noqa: E731
    (M_all, z_all), (M_before, z_before) = jax.lax.scan(fold, empty_memory(B, G, K),
                                                        (by_segment(k_seg), by_segment(v_seg)))
    flat = lambda x: jnp.moveaxis(x, 0, 1).reshape(B * O, *x.shape[2:])  # noqa: E731
    if fused:
        dot_seg, mem_seg = _fused(q_seg, k_seg, v_seg, sink_k, sink_v, flat(M_before), flat(z_before), spec.eps)
    else:
        mem_seg = memory_readout(q_seg, flat(M_before), flat(z_before), spec.eps)
    has_seg = jnp.broadcast_to((jnp.arange(O) > 0)[None, :, None], (B, O, seg_len)).reshape(B * O, seg_len)
    parts.append(gate(mem_seg, dot_seg, has_seg).reshape(B, O * seg_len, H, -1))

    q_rem, k_rem, v_rem = q[:, S + O * seg_len:], k_BTGK[:, S + O * seg_len:], v[:, S + O * seg_len:]
    if fused:
        dot_rem, mem_rem = _fused(q_rem, k[:, S + O * seg_len:], v_rem, sink_k, sink_v, M_all, z_all, spec.eps)
    else:
        dot_rem = _local_attention(q_rem, k[:, S + O * seg_len:], v_rem, sink_k, sink_v)
        mem_rem = memory_readout(q_rem, M_all, z_all, spec.eps)
    parts.append(gate(mem_rem, dot_rem, True))
    state = {"sink_k": k_BTGK[:, :S], "sink_v": sink_v, "rest_k": k_rem, "rest_v": v_rem, "M": M_all, "z": z_all}
    return jnp.concatenate(parts, axis=1), state


def segmented_attention_reference(q_BTHK, k_BTGK, v_BTGK, layout: SegmentLayout, rope: Rope, spec: InfiniSpec,
                                  gate):
    """:func:`segmented_attention` part by part: the sink causally; then each segment in turn attends
    to the sink and causally to itself, reads the memory of the segments before it through the gate
    (none for the first) and is folded into the memory; then the remaining part with all O."""
    B, T, _, K = q_BTHK.shape
    G = k_BTGK.shape[2]
    S, seg_len, O = layout.sink, layout.segment, layout.n_segments
    pos_BT = jnp.broadcast_to(layout.local_positions(), (B, T))
    q, k, v = rope.apply(q_BTHK, pos_BT), rope.apply(k_BTGK, pos_BT), v_BTGK

    def local(lo, hi):  # a part at [lo, hi) over the sink and itself
        n = hi - lo
        mask = jnp.concatenate([jnp.ones((n, S), bool), jnp.tril(jnp.ones((n, n), bool))], axis=1)
        return dot_product_attention_reference(q[:, lo:hi], jnp.concatenate([k[:, :S], k[:, lo:hi]], axis=1),
                                               jnp.concatenate([v[:, :S], v[:, lo:hi]], axis=1),
                                               jnp.broadcast_to(mask, (B, n, S + n)))

    parts = [dot_product_attention_reference(q[:, :S], k[:, :S], v[:, :S],
                                             jnp.broadcast_to(jnp.tril(jnp.ones((S, S), bool)), (B, S, S)))
             ] if S else []
    M, z = empty_memory(B, G, K)
    for i in range(O):
        lo = S + i * seg_len
        a_mem = memory_readout_reference(q[:, lo:lo + seg_len], M, z, spec.eps)
        parts.append(gate(a_mem, local(lo, lo + seg_len), i > 0))
        M, z = memory_update_reference(M, z, k[:, lo:lo + seg_len], v[:, lo:lo + seg_len], rule=spec.update,
                                       eps=spec.eps)
    rest = S + O * seg_len
    parts.append(gate(memory_readout_reference(q[:, rest:], M, z, spec.eps), local(rest, T), True))
    state = {"sink_k": k_BTGK[:, :S], "sink_v": v[:, :S], "rest_k": k_BTGK[:, rest:], "rest_v": v[:, rest:],
             "M": M, "z": z}
    return jnp.concatenate(parts, axis=1), state
