"""EdgeInfinite's per-segment attention as one Pallas kernel for GPUs (Pallas's Triton backend): the
same two outputs as :func:`edge_jax.layers.kernels.segment_attention.segment_attention_reference`.

For row n of the B·O rows (each batch row's O segments flattened, or its remaining part with O = 1;
sink row n // O), query head h (KV head g = h // Q, Q = H/G) and query i < seg_len:

    A_dot[i] = softmax_j( q_i·[s_j ; k_j≤i] / sqrt(K) ) [V_sink ; V_seg]   (online softmax, float32)
    A_mem[i] = σ(q_i) M_n,g / (σ(q_i)·z_n,g + ε)                            (σ = ELU + 1)

Grid ``(H, seg_len/bq, B·O)``, one program per (head, query block, row), no state across programs. The
Triton backend puts grid axis 0 on CUDA's x axis, which the block scheduler walks fastest: the H/G
heads of a KV group run side by side, so each K/V tile comes from HBM about once and from L2 for
the group's other heads (at the paper's shape a row's K/V of one group is 1 MiB, H100's L2 50 MiB).
Packing a group's heads into one [Q*bq, K] tile would share the loads in registers instead, but
needs Q = H/G a power of two and a reshape across the head axis; L2 sharing keeps any H/G. Query
blocks run in reverse, so the longest programs (most causal key blocks) start first.

Each program loads its [bq, K] query block once, then runs an online softmax (m, l, acc in float32)
over key blocks of bk: the sink of row n // O (read in place, never copied O times; keys >= S
masked), the segment's key blocks wholly below the causal diagonal (no mask), and the one or two
blocks the diagonal crosses (causal mask); blocks above the diagonal are never read. It then writes
A_dot = acc / l in v's dtype and the memory readout of the same query block (σ(q) [bq, K] @ M [K, K])
straight into the [B·O, seg_len, H, K] outputs. Ragged seg_len and S need no padding: Triton reads nothing
outside a block by itself, so every load that can pass the end (last query block, key blocks on
the diagonal, the sink's last block) is masked with zeros as ``other`` (zero values: padded keys
add nothing to p @ v) and the last query block's store is masked. Triton wants power-of-two tiles
with dot dims >= 16: K (of q/k and of v) below 16 or not a power of two is padded with zeros in the wrapper
(zero q/k columns change no score; σ(0) = 1, so M's and z's padded rows are zero and add nothing).

Defaults for an H100 (H 32, G 8, K 128, bf16, S 300, seg_len 2048 or 200): bq 128, bk 64, 8 warps, 3
stages. 128 query rows per program give each [64, 128] K/V tile pair (32 KiB of bf16) two 128 x 64 x 128
dots, 128 flops per byte loaded, and the 16 query blocks and 4 heads that read the same tile mostly find
it in L2; 8 warps (256 threads) hold the float32 accumulator (128 x 128: 64 registers a thread), the
scores (128 x 64: 32) and the query tile, which should fit without spilling (not measured on a GPU yet;
bk 128 would double the score tile); 3 stages keep two K/V tile pairs in flight in shared memory (96 KiB
of 228) under the loop's dots. The sink of 300 is 5 key blocks (20 keys of the last masked); query block
i of a segment reads 2i full and 2 diagonal blocks, so a 2048-token segment's 16 query blocks read 272
segment blocks where a dense 16 x 32 grid would read 512.

Dots take bf16 operands on tensor cores; with float32 inputs they run in IEEE float32 (Pallas's
Triton default for float32 is TF32). The memory readout multiplies float32 σ(q) by float32 M: IEEE
for float32 queries, TF32 otherwise (what XLA's default precision does on Ampere and later).
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from edge_jax.layers.infini.compressive import feature_map
from edge_jax.layers.kernels import backend

pltr = backend.pltriton  # None on a JAX without Pallas's Triton backend (then backend.TRITON is False)
KERNEL = "segment_attention"
BLOCK_Q, BLOCK_K, NUM_WARPS, NUM_STAGES = 128, 64, 8, 3


def _kernel(*refs, seg_len, S, bq, bk, nq, scale, eps, has_sink, dot_precision, mem_precision):
    if has_sink:
        q_ref, k_ref, v_ref, sk_ref, sv_ref, M_ref, z_ref, o_ref, mem_ref = refs
    else:
        q_ref, k_ref, v_ref, M_ref, z_ref, o_ref, mem_ref = refs
    qi = nq - 1 - pl.program_id(1)  # reversed: the longest programs first
    rows = qi * bq + jnp.arange(bq)
    row_ok = (rows < seg_len)[:, None]
    q_TK = pltr.load(q_ref, mask=row_ok, other=0)
    cols = jnp.arange(bk)

    def step(carry, k_SK, v_SK, mask_TS):
        m_T, l_T, acc_TK = carry
        s_TS = lax.dot_general(q_TK, k_SK, (((1,), (1,)), ((), ())), precision=dot_precision,
                               preferred_element_type=jnp.float32) * scale
        if mask_TS is not None:
            s_TS = jnp.where(mask_TS, s_TS, -jnp.inf)
        m_new = jnp.maximum(m_T, jnp.max(s_TS, axis=1))
        p_TS = jnp.exp(s_TS - m_new[:, None])
        alpha = jnp.exp(m_T - m_new)
        acc_TK = alpha[:, None] * acc_TK + jnp.dot(p_TS.astype(v_SK.dtype), v_SK, precision=dot_precision,
                                                   preferred_element_type=jnp.float32)
        return m_new, alpha * l_T + jnp.sum(p_TS, axis=1), acc_TK

    def masked_block(kr, vr, start, limit):  # a key block whose rows past ``limit`` are zeros
        start = pl.multiple_of(start, bk)
        ok = (start + cols < limit)[:, None]
        return (pltr.load(kr.at[pl.ds(start, bk), :], mask=ok, other=0),
                pltr.load(vr.at[pl.ds(start, bk), :], mask=ok, other=0))

    def sink_body(kb, carry):
        k_SK, v_SK = masked_block(sk_ref, sv_ref, kb * bk, S)
        return step(carry, k_SK, v_SK, (kb * bk + cols < S)[None, :])

    def full_body(kb, carry):  # every key <= the block's first query < seg_len: no mask, no bound
        start = pl.multiple_of(kb * bk, bk)
        return step(carry, k_ref[pl.ds(start, bk), :], v_ref[pl.ds(start, bk), :], None)

    def diagonal_body(kb, carry):
        k_SK, v_SK = masked_block(k_ref, v_ref, kb * bk, seg_len)
        return step(carry, k_SK, v_SK, rows[:, None] >= (kb * bk + cols)[None, :])

    Kv = v_ref.shape[-1]  # the value width (K, padded)
    carry = (jnp.full((bq,), -1e30, jnp.float32), jnp.zeros((bq,), jnp.float32), jnp.zeros((bq, Kv), jnp.float32))
    if has_sink:
        carry = lax.fori_loop(0, pl.cdiv(S, bk), sink_body, carry)
    n_full = (qi * bq + 1) // bk  # blocks whose last key is at or before the block's first query
    n_end = jnp.minimum(pl.cdiv((qi + 1) * bq, bk), pl.cdiv(seg_len, bk))  # through the diagonal
    carry = lax.fori_loop(0, n_full, full_body, carry)
    _, l_T, acc_TK = lax.fori_loop(n_full, n_end, diagonal_body, carry)
    pltr.store(o_ref, (acc_TK / l_T[:, None]).astype(o_ref.dtype), mask=row_ok)

    sq_TK = feature_map(q_TK)
    num_TK = jnp.dot(sq_TK, M_ref[...], precision=mem_precision, preferred_element_type=jnp.float32)
    den_T = jnp.sum(sq_TK * z_ref[...][None, :], axis=1) + eps
    pltr.store(mem_ref, num_TK / den_T[:, None], mask=row_ok)


def segment_attention_gpu(q_OTHK, k_OSGK, v_OSGK, sink_k_BSGK, sink_v_BSGK, M_OGKK, z_OGK, eps: float = 1e-6,
                          block_q: int | None = None, block_k: int | None = None, interpret=None):
    """``(A_dot [B·O, seg_len, H, K] in v's dtype, A_mem [B·O, seg_len, H, K] float32)`` by the Triton
    kernel (module docstring); row n's sink is row n // O of the [B, S, G, K] sink arrays, S may be 0. The
    value width (v's and M's last axis, ``Kv``) is K in every caller; the kernel takes any. ``block_q`` /
    ``block_k``: powers of two >= 16 (default 128 / 64, cut to a short segment); ``interpret``:
    ``pallas_call``'s (default :func:`edge_jax.layers.kernels.backend.interpret`)."""
    n_rows, seg_len, H, K = q_OTHK.shape
    B, S, G = sink_k_BSGK.shape[:3]
    Kv = v_OSGK.shape[-1]
    if n_rows % B or H % G or k_OSGK.shape != (n_rows, seg_len, G, K) or M_OGKK.shape != (n_rows, G, K, Kv):
        raise ValueError(f"segment_attention_gpu: q {q_OTHK.shape}, k {k_OSGK.shape}, sink {sink_k_BSGK.shape}, "
                         f"M {M_OGKK.shape} do not fit [B*O, seg_len, H, K], [B*O, seg_len, G, K], [B, S, G, K], "
                         "[B*O, G, K, K] (B*O rows: O segments per batch row)")
    block_q, block_k = block_q or BLOCK_Q, block_k or BLOCK_K
    backend.check_triton_blocks("segment_attention_gpu", block_q=block_q, block_k=block_k)
    interpret = backend.interpret(KERNEL) if interpret is None else interpret
    Q, O, has_sink = H // G, n_rows // B, S > 0  # query heads per KV head; segments per batch row
    short = backend.triton_dim(seg_len)  # a short segment is one block (no 128 rows for a part of 20)
    bq, bk = min(block_q, short), min(block_k, short)
    nq = pl.cdiv(seg_len, bq)
    seg_block, sink_block = max(bk, backend.triton_dim(seg_len)), max(bk, backend.triton_dim(S))  # whole K/V
    Kp, Kvp = backend.triton_dim(K), backend.triton_dim(Kv)
    pad = backend.pad_axis

    q, k, sk = (pad(x, 3, Kp) for x in (q_OTHK, k_OSGK, sink_k_BSGK))
    v, sv = pad(v_OSGK, 3, Kvp), pad(sink_v_BSGK, 3, Kvp)
    M = pad(pad(M_OGKK.astype(jnp.float32), 2, Kp), 3, Kvp)
    z = pad(z_OGK.astype(jnp.float32), 2, Kp)

    qblock = lambda h, i, n: (n, nq - 1 - i, h, 0)  # noqa: E731
    group = lambda h, i, n: (n, 0, h // Q, 0)  # noqa: E731
    in_specs = [pl.BlockSpec((None, bq, None, Kp), qblock), pl.BlockSpec((None, seg_block, None, Kp), group),
                pl.BlockSpec((None, seg_block, None, Kvp), group)]
    args = [q, k, v]
    if has_sink:
        sink = lambda h, i, n: (n // O, 0, h // Q, 0)  # noqa: E731
        in_specs += [pl.BlockSpec((None, sink_block, None, Kp), sink),
                     pl.BlockSpec((None, sink_block, None, Kvp), sink)]
        args += [sk, sv]
    in_specs += [pl.BlockSpec((None, None, Kp, Kvp), lambda h, i, n: (n, h // Q, 0, 0)),
                 pl.BlockSpec((None, None, Kp), lambda h, i, n: (n, h // Q, 0))]
    args += [M, z]
    out_spec = pl.BlockSpec((None, bq, None, Kvp), qblock)
    f32 = q_OTHK.dtype == jnp.float32
    kernel = functools.partial(
        _kernel, seg_len=seg_len, S=S, bq=bq, bk=bk, nq=nq, scale=1.0 / math.sqrt(K), eps=float(eps), has_sink=has_sink,
        dot_precision=lax.Precision.HIGHEST if f32 else None,
        mem_precision=lax.Precision.HIGHEST if f32 else lax.Precision.DEFAULT)
    a_dot, a_mem = pl.pallas_call(
        kernel, grid=(H, nq, n_rows), in_specs=in_specs, out_specs=[out_spec, out_spec],
        out_shape=[jax.ShapeDtypeStruct((n_rows, seg_len, H, Kvp), v_OSGK.dtype),
                   jax.ShapeDtypeStruct((n_rows, seg_len, H, Kvp), jnp.float32)],
        compiler_params=backend.triton_params(num_warps=NUM_WARPS, num_stages=NUM_STAGES),
        interpret=interpret, name="segment_attention_gpu")(*args)
    return (a_dot, a_mem) if Kvp == Kv else (a_dot[..., :Kv], a_mem[..., :Kv])
