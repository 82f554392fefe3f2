"""EdgeInfinite's per-segment attention as one Pallas TPU kernel (and, for a GPU, the Triton variant in
:mod:`edge_jax.layers.kernels.segment_attention_gpu`): local causal softmax attention over
the sink tokens and the segment, and the compressive-memory readout, for all query heads of a KV group
in one tile.

The rows (axis O of ``q_OTHK`` and the others) are the B·O chunks of a batch flattened: each batch
row's O segments (or its remaining part, O = 1). For every row n and KV head g, with the row's
queries q_i (i < seg_len, after RoPE), the sink keys s_j (j < S) and the row's own keys k_j:

    A_dot[i] = softmax_j( q_i·[s_j ; k_j≤i] / sqrt(K) ) [V_sink ; V_seg]      (flash-style, online softmax)
    A_mem[i] = σ(q_i) M_n / (σ(q_i)·z_n + ε)                                   (σ = ELU + 1, eq. 7)

``M_n, z_n`` is the memory before the row's segment (zero for the first: the gate then selects
A_dot alone). Grid ``(B·O, G, seg_len/bq, 1 + seg_len/bk)``: key step 0 is the whole sink (padded to a
multiple of 128 with its padding masked, so a sink of 300 works), the next steps the segment's key
blocks; blocks above the causal diagonal are skipped and their index maps clamp to the diagonal block,
so they are not fetched either. The Q = H/G query heads of the group share each key/value block (GQA).
The segment is padded to a multiple of the blocks; padded keys come after every real query (masked by
causality) and padded query rows are dropped. The sink of row n is row ``n // O`` of the [B, S, ...]
sink arrays, so it is never copied O times.

What stays in XLA (:func:`edge_jax.layers.infini.segmented.segmented_attention`): the memory update
(a scan over segments of one [K, seg_len] x [seg_len, K] product per KV head, linear or delta rule:
O(seg_len K²) per segment against the attention's O(seg_len (S + seg_len) K Q), and sequential across
segments, so a kernel would save little); the sink tokens' own causal attention (S x S, once per batch
row); the memory gate (the only trained part).

Gradients: :func:`segment_attention` is a ``jax.custom_vjp`` whose backward is the VJP of
:func:`segment_attention_reference` (recomputed from the inputs): exact gradients w.r.t. q, k, v,
the sink and the memory (hence through the memory scan into k and v), at the XLA path's backward
cost and memory. EdgeInfinite trains only the gate, but gradients still reach earlier layers' gates
through this attention.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from edge_jax.layers.attention.dot import causal_mask, dot_product_attention
from edge_jax.layers.infini.compressive import feature_map, memory_readout
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.segment_attention_gpu import segment_attention_gpu

KERNEL = "segment_attention"
SINK_ALIGN = 128  # the sink is one key block, padded to whole lanes
ROW_ALIGN = 16  # query/key block rows: a whole bf16 sublane tile
VMEM_LIMIT = 48 * 2 ** 20


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def default_blocks() -> tuple[int, int]:
    """(block_q, block_k): 512 x 512 on TPU (few grid steps for a 2048-token segment, tiles well inside
    VMEM); the interpreter elsewhere pays per grid step, so the same large blocks serve it too."""
    return 512, 512


def _blocks(seg_len: int, block_q: int, block_k: int) -> tuple[int, int, int]:
    """(bq, bk, padded length): one block of seg_len rounded up to 16 rows when that is no larger than
    both blocks (a short remaining part is not padded to a whole 512 block), else the blocks as given
    and seg_len padded to the larger (a multiple of the smaller)."""
    short = _round_up(seg_len, ROW_ALIGN)
    if short <= min(block_q, block_k):
        return short, short, short
    return block_q, block_k, _round_up(seg_len, max(block_q, block_k))


def segment_attention_reference(q_OTHK, k_OSGK, v_OSGK, sink_k_BSGK, sink_v_BSGK, M_OGKK, z_OGK, eps: float = 1e-6,
                                block_q: int | None = None, block_k: int | None = None, interpret=None):
    """The XLA path: ``(A_dot [B·O, seg_len, H, K] in v's dtype, A_mem [B·O, seg_len, H, K] float32)``.
    The sink is repeated for the O rows of its batch row and prepended to the row's keys; every query
    sees the sink and causally its own segment. Block sizes and ``interpret`` are ignored (same
    signature)."""
    n_rows, seg_len = q_OTHK.shape[:2]
    B, S = sink_k_BSGK.shape[:2]
    rep = lambda x: jnp.repeat(x, n_rows // B, axis=0)  # noqa: E731 - [B, S, ...] -> [B·O, S, ...]
    keys = jnp.concatenate([rep(sink_k_BSGK), k_OSGK], axis=1)
    values = jnp.concatenate([rep(sink_v_BSGK), v_OSGK], axis=1)
    q_pos = jnp.broadcast_to(jnp.arange(seg_len) + S, (n_rows, seg_len))
    k_pos = jnp.broadcast_to(jnp.arange(S + seg_len), (n_rows, S + seg_len))
    a_dot = dot_product_attention(q_OTHK, keys, values, causal_mask(q_pos, k_pos))
    return a_dot, memory_readout(q_OTHK, M_OGKK, z_OGK, eps)


def _kernel(*refs, Q, bq, bk, S, scale, eps, has_sink):
    if has_sink:
        q_ref, k_ref, v_ref, sk_ref, sv_ref, M_ref, z_ref, o_ref, mem_ref, m_sc, l_sc, acc_sc = refs
    else:
        q_ref, k_ref, v_ref, M_ref, z_ref, o_ref, mem_ref, m_sc, l_sc, acc_sc = refs
    qi, ki = pl.program_id(2), pl.program_id(3)
    n_sink = int(has_sink)

    @pl.when(ki == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    def accumulate(k_SK, v_SK, mask_TS):
        """One key block for every head of the group. The first block a row sees (the sink, or local
        block 0 without one) always has an allowed key, so m is finite before a fully masked row."""
        for r in range(Q):
            s = jax.lax.dot_general(q_ref[0, r], k_SK, (((1,), (1,)), ((), ())),
                                    preferred_element_type=jnp.float32) / scale
            s = jnp.where(mask_TS, s, -jnp.inf)
            m_prev = m_sc[r]
            m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m_prev - m_new)
            l_sc[r] = alpha * l_sc[r] + jnp.sum(p, axis=-1, keepdims=True)
            acc_sc[r] = alpha * acc_sc[r] + jnp.dot(p.astype(v_SK.dtype), v_SK, preferred_element_type=jnp.float32)
            m_sc[r] = m_new

    if has_sink:
        @pl.when(ki == 0)
        def _sink():
            cols = jax.lax.broadcasted_iota(jnp.int32, (bq, sk_ref.shape[2]), 1)
            accumulate(sk_ref[0, 0], sv_ref[0, 0], cols < S)

    kb = ki - n_sink  # the local key block

    @pl.when((ki >= n_sink) & (kb * bk <= qi * bq + bq - 1))
    def _local():
        rows = qi * bq + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 0)
        cols = kb * bk + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 1)
        accumulate(k_ref[0, 0], v_ref[0, 0], rows >= cols)

    @pl.when(ki == pl.num_programs(3) - 1)
    def _finish():
        M, z = M_ref[0, 0], z_ref[0, 0]
        for r in range(Q):
            o_ref[0, r] = (acc_sc[r] / l_sc[r]).astype(o_ref.dtype)
            sq = feature_map(q_ref[0, r])
            num = jnp.dot(sq, M, preferred_element_type=jnp.float32)
            den = jnp.sum(sq * z, axis=-1, keepdims=True) + eps
            mem_ref[0, r] = num / den


def _forward(q_OTHK, k_OSGK, v_OSGK, sink_k_BSGK, sink_v_BSGK, M_OGKK, z_OGK, eps, block_q, block_k, interpret):
    n_rows, seg_len, H, K = q_OTHK.shape
    B, S, G = sink_k_BSGK.shape[:3]
    Q, O = H // G, n_rows // B  # query heads per KV head; segments per batch row
    Kv = M_OGKK.shape[-1]  # the value width (K)
    bq, bk, padded = _blocks(seg_len, block_q, block_k)
    pad_rows = lambda x: jnp.pad(x, ((0, 0), (0, padded - x.shape[1]), (0, 0), (0, 0)))  # noqa: E731
    heads_first = lambda x: jnp.swapaxes(pad_rows(x), 1, 2)  # noqa: E731 - [n, T, h, K] -> [n, h, Tp, K]
    q_OHTK, k_OGSK, v_OGSK = heads_first(q_OTHK), heads_first(k_OSGK), heads_first(v_OSGK)
    has_sink = S > 0
    nq, nk = padded // bq, padded // bk + int(has_sink)

    def local_block(n, g, qi, ki):  # clamped into [0, the last block at or below the diagonal]
        return (n, g, jnp.clip(ki - int(has_sink), 0, (qi * bq + bq - 1) // bk), 0)

    in_specs = [pl.BlockSpec((1, Q, bq, K), lambda n, g, qi, ki: (n, g, qi, 0)),
                pl.BlockSpec((1, 1, bk, K), local_block), pl.BlockSpec((1, 1, bk, Kv), local_block)]
    args = [q_OHTK, k_OGSK, v_OGSK]
    if has_sink:
        Sp = _round_up(S, SINK_ALIGN)
        sink = lambda x: jnp.swapaxes(jnp.pad(x, ((0, 0), (0, Sp - S), (0, 0), (0, 0))), 1, 2)  # noqa: E731
        in_specs += [pl.BlockSpec((1, 1, Sp, K), lambda n, g, qi, ki: (n // O, g, 0, 0)),
                     pl.BlockSpec((1, 1, Sp, Kv), lambda n, g, qi, ki: (n // O, g, 0, 0))]
        args += [sink(sink_k_BSGK), sink(sink_v_BSGK)]
    in_specs += [pl.BlockSpec((1, 1, K, Kv), lambda n, g, qi, ki: (n, g, 0, 0)),
                 pl.BlockSpec((1, 1, 1, K), lambda n, g, qi, ki: (n, g, 0, 0))]
    args += [M_OGKK.astype(jnp.float32), z_OGK.astype(jnp.float32)[:, :, None, :]]
    out_block = pl.BlockSpec((1, Q, bq, Kv), lambda n, g, qi, ki: (n, g, qi, 0))
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=0, grid=(n_rows, G, nq, nk), in_specs=in_specs, out_specs=[out_block, out_block],
        scratch_shapes=[pltpu.VMEM((Q, bq, 1), jnp.float32), pltpu.VMEM((Q, bq, 1), jnp.float32),
                        pltpu.VMEM((Q, bq, Kv), jnp.float32)])
    kernel = functools.partial(_kernel, Q=Q, bq=bq, bk=bk, S=S, scale=math.sqrt(K), eps=eps, has_sink=has_sink)
    a_dot, a_mem = pl.pallas_call(
        kernel, grid_spec=spec,
        out_shape=[jax.ShapeDtypeStruct((n_rows, H, padded, Kv), v_OSGK.dtype),
                   jax.ShapeDtypeStruct((n_rows, H, padded, Kv), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=VMEM_LIMIT),
        interpret=interpret)(*args)
    back = lambda x: jnp.swapaxes(x, 1, 2)[:, :seg_len]  # noqa: E731
    return back(a_dot), back(a_mem)


def _variant(q, k, v, sink_k, sink_v, M, z, eps, block_q, block_k, interpret):
    """The step's variant (:func:`backend.gpu_variant`): the Triton one for a GPU, else the TPU one."""
    if backend.gpu_variant():
        return segment_attention_gpu(q, k, v, sink_k, sink_v, M, z, eps=eps, block_q=block_q, block_k=block_k,
                                     interpret=interpret)
    dq, dk = default_blocks()
    return _forward(q, k, v, sink_k, sink_v, M, z, eps, block_q or dq, block_k or dk, interpret)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10))
def _fused(q, k, v, sink_k, sink_v, M, z, eps, block_q, block_k, interpret):
    return _variant(q, k, v, sink_k, sink_v, M, z, eps, block_q, block_k, interpret)


def _fused_fwd(q, k, v, sink_k, sink_v, M, z, eps, block_q, block_k, interpret):
    return _variant(q, k, v, sink_k, sink_v, M, z, eps, block_q, block_k, interpret), (q, k, v, sink_k, sink_v, M, z)


def _fused_bwd(eps, block_q, block_k, interpret, saved, cotangents):
    _, vjp = jax.vjp(lambda *a: segment_attention_reference(*a, eps=eps), *saved)
    return vjp(cotangents)


_fused.defvjp(_fused_fwd, _fused_bwd)


def segment_attention(q_OTHK, k_OSGK, v_OSGK, sink_k_BSGK, sink_v_BSGK, M_OGKK, z_OGK, eps: float = 1e-6,
                      block_q: int | None = None, block_k: int | None = None, interpret=None):
    """``(A_dot [B·O, seg_len, H, K] in v's dtype, A_mem [B·O, seg_len, H, K] float32)`` of B·O segments
    (row n's sink is row n // O of the sink arrays; O = 1: the remaining part), by the Pallas kernel (module
    docstring; on a GPU the Triton variant, :mod:`edge_jax.layers.kernels.segment_attention_gpu`).
    ``block_q`` / ``block_k``: query / key rows per tile (TPU default :func:`default_blocks`, cut to
    the segment; one must divide the other; None on GPU: that variant's defaults); ``interpret``:
    ``pallas_call``'s (default: the backend's, :func:`edge_jax.layers.kernels.backend.interpret`)."""
    n_rows, seg_len, H, K = q_OTHK.shape
    B, _, G = sink_k_BSGK.shape[:3]
    if n_rows % B or H % G or k_OSGK.shape != (n_rows, seg_len, G, K) or M_OGKK.shape[:3] != (n_rows, G, K):
        raise ValueError(f"segment_attention: q {q_OTHK.shape}, k {k_OSGK.shape}, sink {sink_k_BSGK.shape}, "
                         f"M {M_OGKK.shape} do not fit [B*O, seg_len, H, K], [B*O, seg_len, G, K], [B, S, G, K], "
                         "[B*O, G, K, K] (B*O rows: O segments per batch row)")
    if not backend.gpu_variant():
        dq, dk = default_blocks()
        bq, bk = block_q or dq, block_k or dk
        if max(bq, bk) % min(bq, bk) or bq % 8 or bk % 8:
            raise ValueError(f"segment_attention: blocks {bq} x {bk} must be multiples of 8, one dividing the other")
    interpret = backend.interpret(KERNEL) if interpret is None else interpret
    return _fused(q_OTHK, k_OSGK, v_OSGK, sink_k_BSGK, sink_v_BSGK, M_OGKK, z_OGK, float(eps), block_q, block_k,
                  interpret)
