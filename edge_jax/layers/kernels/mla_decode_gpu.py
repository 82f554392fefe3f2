"""MLA's absorbed decode step as a Pallas GPU kernel (Triton backend): flash-decoding over the filled slots.

The same computation as :func:`edge_jax.layers.kernels.mla_decode.mla_decode_reference`: for row b, head h,
over the filled slots j < length_b, o~_h = sum_j softmax_j((q~_h . c_j + q^R_h . k^R_j) * scale) c_j, in the
latent's dtype (forward only).

Grid (B, splits), one program per (row b, run r), all parallel. The program reads ``length = length_B[b]``,
deals the row's ceil(length / block_s) filled blocks into ``splits`` equal contiguous runs (from the filled
length, not the buffer: a short context in a long cache still spreads over every run) and loops over its
run's blocks with a traced trip count (``lax.fori_loop`` -> ``scf.for``), so no slot of a later block is read.
Per block it loads one [block_s, C] latent block and one [block_s, R] RoPE-key block with a mask ``slot <
length`` (zeros past it: this masks the row's last block and a buffer whose S is not a multiple of block_s
alike, and nothing past the length is read) and meets them with all H heads at once: one [H, C] query tile
and one [H, R] RoPE-query tile (the latent is read once for all heads and serves as key and as value). The
online softmax (running max m, sum l, [H, C] accumulator) is float32; the probabilities meet the latent in
its dtype. Each program writes o [H, C], m [H], l [H] (float32) once; an empty run (more runs than filled
blocks) writes m = MASKED, l = 0, o = 0. The wrapper merges the runs with :func:`merge_runs`.

What it reads: the queries once per program and each row's filled slots once, rounded up to a block (the
masked loads skip the slots past the length); what it writes: splits x (H x C + 2H) float32 per row.

Triton wants power-of-two shapes and ``dot`` dims >= 16: the wrapper zero-pads H, C and R to the next power of
two >= 16 where they are not (a zero query head is sliced away after; zero C / R columns of both the query
and the latent / RoPE key add 0 to every score, and zero latent columns give zero output columns, sliced
away). Padding C or R copies the cache (not at PLM's shape: H 16, C 512, R 64 need none).

Defaults for an H100 (132 SMs) at PLM-1.8B's shape (H 16, C 512, R 64, bf16, batch 1):

* ``block_s`` 64: one block is 64 x (512 + 64) bf16 = 72 KB of shared memory; with ``num_stages`` 2 (the
  next block's loads in flight while this one computes) 144 KB, within the 227 KB an H100 block may use
  (128-slot blocks would need 288 KB). One program per SM keeps ~72 KB in flight, about 3x what DRAM
  latency needs at the SM's share of the bandwidth (3.35 TB/s / 132 = 25 GB/s x ~1 us).
* ``splits``: 132 // B (one wave of programs on the 132 SMs), at most the buffer's blocks. At 32K filled
  slots a run is 4 blocks, at 8K 1 block; at 2K 32 runs work and 100 write an empty result. The price is
  the float32 partials: 132 x 16 x 512 x 4 B = 4.3 MB written and merged per step.
* ``num_warps`` 8: with H = 16 rows the MMAs split the warps along the slot / C axis, so every warp holds
  the whole [16, 512] bf16 query tile as a dot operand (128 registers per thread whatever the warp
  count); the [16, 512] float32 accumulator adds 8192 / (32 x num_warps): 64 registers at 4 warps (~230
  in all, near the 255 limit), 32 at 8. The compute per block (2 x 16 x 64 x 512 MACs) is small next to
  the 72 KB it waits for; 8 warps are for registers, not throughput.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.flash_decoding import MASKED, merge_runs

pltr = backend.pltriton  # None on a JAX without Pallas's Triton backend (then backend.TRITON is False)
NAME = "mla_decode"
BLOCK_S = 64     # slots per block (module docstring)
SMS = 132        # H100 SXM streaming multiprocessors: default splits = SMS // B
NUM_WARPS = 8
NUM_STAGES = 2


def _kernel(len_ref, q_ref, qr_ref, c_ref, kr_ref, o_ref, m_ref, l_ref, *, scale, bs, splits):
    b, r = pl.program_id(0), pl.program_id(1)
    length = len_ref[b]
    n_filled = pl.cdiv(length, bs)
    per = pl.cdiv(n_filled, splits)
    lo = jnp.minimum(r * per, n_filled)          # this run's blocks: [lo, hi), empty when lo == hi
    hi = jnp.minimum(lo + per, n_filled)
    q_HC, qr_HR = q_ref[...], qr_ref[...]
    H, C = q_HC.shape
    R = qr_HR.shape[1]
    nt = (((1,), (1,)), ((), ()))                # contract the last dims: [H, X] x [bs, X] -> [H, bs]
    prec = jax.lax.Precision.HIGHEST if q_HC.dtype == jnp.float32 else None  # float32: IEEE, not TF32

    def block(i, state):
        m_H, l_H, acc_HC = state
        start = pl.multiple_of(i * bs, bs)
        slot_S = start + jax.lax.broadcasted_iota(jnp.int32, (bs,), 0)
        ok_S = slot_S < length                   # False only in the row's last block (or past S)
        c_SC = pltr.load(c_ref.at[pl.ds(start, bs), :], mask=jnp.broadcast_to(ok_S[:, None], (bs, C)), other=0)
        kr_SR = pltr.load(kr_ref.at[pl.ds(start, bs), :], mask=jnp.broadcast_to(ok_S[:, None], (bs, R)), other=0)
        s_HS = (jax.lax.dot_general(q_HC, c_SC, nt, precision=prec, preferred_element_type=jnp.float32)
                + jax.lax.dot_general(qr_HR, kr_SR, nt, precision=prec, preferred_element_type=jnp.float32)) * scale
        s_HS = jnp.where(ok_S[None, :], s_HS, MASKED)
        m_new = jnp.maximum(m_H, jnp.max(s_HS, axis=1))
        alpha_H = jnp.exp(m_H - m_new)
        p_HS = jnp.exp(s_HS - m_new[:, None])
        acc_HC = alpha_H[:, None] * acc_HC + jnp.dot(p_HS.astype(c_SC.dtype), c_SC, precision=prec,
                                                      preferred_element_type=jnp.float32)
        return m_new, alpha_H * l_H + jnp.sum(p_HS, axis=1), acc_HC

    init = (jnp.full((H,), MASKED, jnp.float32), jnp.zeros((H,), jnp.float32), jnp.zeros((H, C), jnp.float32))
    m_H, l_H, acc_HC = jax.lax.fori_loop(lo, hi, block, init)
    o_ref[...] = acc_HC
    m_ref[...] = m_H
    l_ref[...] = l_H


def mla_decode_gpu(q_lat_BHC, q_rope_BHR, latent_BSC, k_rope_BSR, length_B, *, scale: float,
                   block_s: int | None = None, splits: int | None = None, interpret=None):
    """The Triton kernel (module docstring): ``o~`` [B, H, C] in the latent's dtype.

    ``block_s``: slots per block, a power of two >= 16 (default 64, capped at S rounded up to one);
    ``splits``: independent runs per row, static (default 132 // B, at most the buffer's blocks);
    ``interpret``: ``pallas_call``'s (default: :func:`edge_jax.layers.kernels.backend.interpret`).
    Every row needs ``length_B >= 1``."""
    B, H, C = q_lat_BHC.shape
    S, R = k_rope_BSR.shape[1:]
    bs = BLOCK_S if block_s is None else block_s
    backend.check_triton_blocks("mla_decode_gpu", block_s=bs)
    bs = min(bs, backend.triton_dim(S))
    n_blocks = pl.cdiv(S, bs)
    splits = max(1, min(max(1, SMS // B) if splits is None else splits, n_blocks))
    interpret = backend.interpret(NAME) if interpret is None else interpret

    Hp, Cp, Rp = backend.triton_dim(H), backend.triton_dim(C), backend.triton_dim(R)
    pad = backend.pad_axis
    q_BHC = pad(pad(q_lat_BHC, 1, Hp), 2, Cp)
    qr_BHR = pad(pad(q_rope_BHR, 1, Hp), 2, Rp)
    c_BSC, kr_BSR = pad(latent_BSC, 2, Cp), pad(k_rope_BSR, 2, Rp)

    kernel = functools.partial(_kernel, scale=float(scale), bs=bs, splits=splits)
    o_BUHC, m_BUH, l_BUH = pl.pallas_call(
        kernel, grid=(B, splits),
        in_specs=[pl.BlockSpec((B,), lambda b, r: (0,)),
                  pl.BlockSpec((None, Hp, Cp), lambda b, r: (b, 0, 0)),
                  pl.BlockSpec((None, Hp, Rp), lambda b, r: (b, 0, 0)),
                  pl.BlockSpec((None, S, Cp), lambda b, r: (b, 0, 0)),
                  pl.BlockSpec((None, S, Rp), lambda b, r: (b, 0, 0))],
        out_specs=[pl.BlockSpec((None, None, Hp, Cp), lambda b, r: (b, r, 0, 0)),
                   pl.BlockSpec((None, None, Hp), lambda b, r: (b, r, 0)),
                   pl.BlockSpec((None, None, Hp), lambda b, r: (b, r, 0))],
        out_shape=[jax.ShapeDtypeStruct((B, splits, Hp, Cp), jnp.float32),
                   jax.ShapeDtypeStruct((B, splits, Hp), jnp.float32),
                   jax.ShapeDtypeStruct((B, splits, Hp), jnp.float32)],
        compiler_params=backend.triton_params(num_warps=NUM_WARPS, num_stages=NUM_STAGES),
        interpret=interpret,
    )(length_B.astype(jnp.int32), q_BHC, qr_BHR, c_BSC, kr_BSR)
    o_BHC = merge_runs(o_BUHC, m_BUH[..., None], l_BUH[..., None], latent_BSC.dtype)
    return o_BHC[:, :H, :C]
