"""MLA's absorbed decode step over the latent cache: one query token per row, read only up to its length.

With W_UK folded into the query (q~_h = W_UK,h^T q_h^C, a d_c vector;
:func:`edge_jax.layers.attention.mla.latent_attention`) one decode step of row b is, over its filled slots
j < length_b::

    s_hj = (q~_h . c_j + q^R_h . k^R_j) * scale          scale = 1 / sqrt(K + R)
    o~_h = sum_j softmax_j(s_hj) c_j                      [d_c]; W_UV is applied after, outside

Three ways to compute it (the kernel in two variants), same signature, the same numbers up to float
rounding:

* :func:`mla_decode_reference`: plain jnp over the whole buffer under a length mask (what the model
  did before: every step reads every slot);
* :func:`mla_decode_xla` (``model.kernels=xla``): flash-decoding in XLA: a loop over fixed-size
  pieces of ``split_s`` slots whose trip count is ceil(max length / split_s), each piece a
  ``dynamic_slice`` of the cache folded into a running max / sum / output (the online softmax), so
  only the filled part of the cache is read (rounded up to a piece);
* :func:`mla_decode` (``model.kernels=pallas``): the Pallas TPU kernel. All H heads form one
  [H, d_c] query tile against a [block_s, d_c] latent block and a [block_s, R] RoPE-key block. The
  row's filled blocks, ceil(length / block_s), are dealt in ``splits`` equal contiguous runs
  (flash-decoding: runs are independent, grid axes B and split are ``parallel``); each run keeps
  its running max m, sum l and unnormalised output in VMEM over the sequential block axis and writes
  them once. The wrapper merges the runs (jnp, :func:`flash_decoding.merge_runs`): M = max_r m_r,
  o = sum_r e^(m_r - M) o_r / sum_r e^(m_r - M) l_r. ``length_B`` is scalar-prefetched: the block
  index map clamps every grid step at or past the row's last filled block to that block (the
  pipeline sees an unchanged block index and fetches nothing), those steps compute nothing, and the
  last block is masked inside.
  Because the runs are dealt from the filled length, not the buffer, a short context in a long
  buffer still splits its work evenly. For a GPU the same function runs the Triton variant
  (:mod:`edge_jax.layers.kernels.mla_decode_gpu`: one program per row and run, a loop over its
  filled blocks with a traced trip count, the same merge).

Every row needs ``length_B >= 1`` (a decode step always attends at least to its own token).
Scores, the softmax state and the accumulator are float32; the probabilities meet the latent in its
dtype (as :func:`edge_jax.layers.attention.mla.latent_attention`); the output is in the latent's dtype.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.flash_decoding import MASKED, merge_runs
from edge_jax.layers.kernels.mla_decode_gpu import mla_decode_gpu

NAME = "mla_decode"
BLOCK_S = 512   # slots per kernel block: 512 x (512 + 64) bf16 = 0.6 MB per fetch at PLM's shape
SPLITS = 2      # independent runs per row: work for both TensorCores of a megacore chip at batch 1
SPLIT_S = 1024  # slots per piece of the XLA loop: over-read < 1024 slots, few iterations


def mla_decode_reference(q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR, length_B, *, scale: float,
                         block_s: int = BLOCK_S, splits: int = SPLITS, interpret=None):
    """Plain masked softmax over every slot of the buffer (``block_s``, ``splits``, ``interpret``
    are ignored: the same signature as :func:`mla_decode`)."""
    del block_s, splits, interpret
    scores_BHS = (jnp.einsum("bhc,bsc->bhs", q_lat_BHC, latent_BSC, preferred_element_type=jnp.float32)
                  + jnp.einsum("bhr,bsr->bhs", q_rope_BHR, k_rope_BSR, preferred_element_type=jnp.float32)) * scale
    filled_BS = jnp.arange(latent_BSC.shape[1])[None] < length_B[:, None]
    scores_BHS = jnp.where(filled_BS[:, None], scores_BHS, MASKED)
    probs_BHS = jax.nn.softmax(scores_BHS, axis=-1).astype(latent_BSC.dtype)
    return jnp.einsum("bhs,bsc->bhc", probs_BHS, latent_BSC, preferred_element_type=jnp.float32
                      ).astype(latent_BSC.dtype)


def _fold(state, q_lat_BHC, q_rope_BHR, c_BSC, kr_BSR, ok_BS, scale):
    """One piece of slots folded into the online-softmax state (m [B, H], l [B, H], acc [B, H, C])."""
    m_BH, l_BH, acc_BHC = state
    s_BHS = (jnp.einsum("bhc,bsc->bhs", q_lat_BHC, c_BSC, preferred_element_type=jnp.float32)
             + jnp.einsum("bhr,bsr->bhs", q_rope_BHR, kr_BSR, preferred_element_type=jnp.float32)) * scale
    s_BHS = jnp.where(ok_BS[:, None], s_BHS, MASKED)
    m_new = jnp.maximum(m_BH, s_BHS.max(axis=-1))
    alpha_BH = jnp.exp(m_BH - m_new)
    p_BHS = jnp.exp(s_BHS - m_new[..., None])
    acc_BHC = alpha_BH[..., None] * acc_BHC + jnp.einsum("bhs,bsc->bhc", p_BHS.astype(c_BSC.dtype), c_BSC,
                                                         preferred_element_type=jnp.float32)
    return m_new, alpha_BH * l_BH + p_BHS.sum(axis=-1), acc_BHC


def mla_decode_xla(q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR, length_B, *, scale: float,
                   split_s: int = SPLIT_S):
    """Flash-decoding in XLA: ceil(max(length_B) / split_s) pieces of ``split_s`` slots, each read
    with a ``dynamic_slice`` and folded into the online softmax; slots past a row's length are
    masked. The last piece is slid back to end at the buffer's end (``dynamic_slice`` would clamp it
    anyway) and its slots already counted are masked."""
    B, H, C = q_lat_BHC.shape
    S = latent_BSC.shape[1]
    sp = min(split_s, S)
    init = (jnp.full((B, H), MASKED, jnp.float32), jnp.zeros((B, H), jnp.float32), jnp.zeros((B, H, C), jnp.float32))

    def piece(i, state):
        lo = i * sp
        start = jnp.minimum(lo, S - sp)
        slot_S = start + jnp.arange(sp)
        ok_BS = (slot_S[None] >= lo) & (slot_S[None] < length_B[:, None])
        c_BSC = jax.lax.dynamic_slice_in_dim(latent_BSC, start, sp, axis=1)
        kr_BSR = jax.lax.dynamic_slice_in_dim(k_rope_BSR, start, sp, axis=1)
        return _fold(state, q_lat_BHC, q_rope_BHR, c_BSC, kr_BSR, ok_BS, scale)

    if sp == S:  # one piece: no loop
        _, l_BH, acc_BHC = piece(0, init)
    else:
        pieces = (jnp.max(length_B).astype(jnp.int32) + sp - 1) // sp
        _, l_BH, acc_BHC = jax.lax.fori_loop(0, pieces, piece, init)
    return (acc_BHC / l_BH[..., None]).astype(latent_BSC.dtype)


def _kernel(len_ref, q_ref, qr_ref, c_ref, kr_ref, o_ref, m_ref, l_ref, m_sc, l_sc, acc_sc, *, scale, bs, splits,
            per_max, ragged):
    b, r, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    length = len_ref[b]
    n_filled = pl.cdiv(length, bs)
    per = pl.cdiv(n_filled, splits)
    blk = r * per + j

    @pl.when(j == 0)
    def _():
        m_sc[...] = jnp.full(m_sc.shape, MASKED, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    @pl.when((j < per) & (blk < n_filled))
    def _():
        q_HC, qr_HR, c_SC, kr_SR = q_ref[0], qr_ref[0], c_ref[0], kr_ref[0]
        nt = (((1,), (1,)), ((), ()))  # contract the last dims: [H, X] x [bs, X] -> [H, bs]
        s_HS = (jax.lax.dot_general(q_HC, c_SC, nt, preferred_element_type=jnp.float32)
                + jax.lax.dot_general(qr_HR, kr_SR, nt, preferred_element_type=jnp.float32)) * scale
        slot_HS = blk * bs + jax.lax.broadcasted_iota(jnp.int32, s_HS.shape, 1)
        s_HS = jnp.where(slot_HS < length, s_HS, MASKED)
        if ragged:  # the buffer's last block runs past S: its rows there are not data, zero them
            slot_S1 = blk * bs + jax.lax.broadcasted_iota(jnp.int32, (bs, 1), 0)
            c_SC = jnp.where(slot_S1 < length, c_SC, jnp.zeros_like(c_SC))
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, s_HS.max(axis=1, keepdims=True))
        alpha = jnp.exp(m_prev - m_new)
        p_HS = jnp.exp(s_HS - m_new)
        l_sc[...] = alpha * l_sc[...] + p_HS.sum(axis=1, keepdims=True)
        acc_sc[...] = alpha * acc_sc[...] + jnp.dot(p_HS.astype(c_SC.dtype), c_SC, preferred_element_type=jnp.float32)
        m_sc[...] = m_new

    @pl.when(j == per_max - 1)
    def _():
        o_ref[0, 0] = acc_sc[...]
        m_ref[0, 0] = m_sc[...]
        l_ref[0, 0] = l_sc[...]


def mla_decode(q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR, length_B, *, scale: float,
               block_s: int | None = None, splits: int | None = None, interpret=None):
    """The Pallas kernel (module docstring): ``o~`` [B, H, d_c] in the latent's dtype; for a GPU
    (:func:`backend.gpu_variant`) the Triton variant, :mod:`edge_jax.layers.kernels.mla_decode_gpu`.

    ``block_s``: slots per block (TPU: a multiple of 8, or at least S: then one block of S; default
    ``BLOCK_S``); ``splits``: independent runs per row (TPU default ``SPLITS``); None on GPU: that
    variant's defaults. ``interpret``: ``pallas_call``'s (default: the backend's,
    :func:`edge_jax.layers.kernels.backend.interpret`)."""
    if backend.gpu_variant():
        return mla_decode_gpu(q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR, length_B, scale=scale,
                              block_s=block_s, splits=splits, interpret=interpret)
    block_s, splits = block_s or BLOCK_S, splits or SPLITS
    B, H, C = q_lat_BHC.shape
    S, R = k_rope_BSR.shape[1:]
    bs = min(block_s, S)
    if bs != S and bs % 8:
        raise ValueError(f"block_s={block_s} must be a multiple of 8 (or at least the {S} cache slots)")
    n_blocks = pl.cdiv(S, bs)
    splits = max(1, min(splits, n_blocks))
    per_max = pl.cdiv(n_blocks, splits)
    interpret = backend.interpret(NAME) if interpret is None else interpret

    def block(b, r, j, len_ref):  # the step's block, clamped to the run's and the row's last filled block
        n_filled = jnp.maximum(pl.cdiv(len_ref[b], bs), 1)
        per = pl.cdiv(n_filled, splits)
        return jnp.minimum(r * per + jnp.minimum(j, per - 1), n_filled - 1)

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(B, splits, per_max),
        in_specs=[pl.BlockSpec((1, H, C), lambda b, r, j, n: (b, 0, 0)),
                  pl.BlockSpec((1, H, R), lambda b, r, j, n: (b, 0, 0)),
                  pl.BlockSpec((1, bs, C), lambda b, r, j, n: (b, block(b, r, j, n), 0)),
                  pl.BlockSpec((1, bs, R), lambda b, r, j, n: (b, block(b, r, j, n), 0))],
        out_specs=[pl.BlockSpec((1, 1, H, C), lambda b, r, j, n: (b, r, 0, 0)),
                   pl.BlockSpec((1, 1, H, 1), lambda b, r, j, n: (b, r, 0, 0)),
                   pl.BlockSpec((1, 1, H, 1), lambda b, r, j, n: (b, r, 0, 0))],
        scratch_shapes=[pltpu.VMEM((H, 1), jnp.float32), pltpu.VMEM((H, 1), jnp.float32),
                        pltpu.VMEM((H, C), jnp.float32)])
    kernel = functools.partial(_kernel, scale=float(scale), bs=bs, splits=splits, per_max=per_max,
                               ragged=S % bs != 0)
    o_BUHC, m_BUH1, l_BUH1 = pl.pallas_call(
        kernel, grid_spec=spec,
        out_shape=[jax.ShapeDtypeStruct((B, splits, H, C), jnp.float32),
                   jax.ShapeDtypeStruct((B, splits, H, 1), jnp.float32),
                   jax.ShapeDtypeStruct((B, splits, H, 1), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=interpret,
    )(length_B.astype(jnp.int32), q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR)
    return merge_runs(o_BUHC, m_BUH1, l_BUH1, latent_BSC.dtype)
