"""The grouped capacity expert FFN for GPUs: Pallas's Triton backend (kernel name ``expert_ffn``).

Computes what :func:`expert_ffn.expert_ffn_reference` does, forward only: per expert ``g``,
``y[g] = (silu(x[g] @ gate[g]) * (x[g] @ up[g])) @ down[g]`` on rows ``0..count[g]-1``, zeros below.
Two ``pallas_call``s, each one program per output tile with its reduction as a loop inside:

1. ``h_XZF = silu(x @ gate) * (x @ up)`` in x's dtype; grid ``(X, cdiv(Z, bc), cdiv(F, bf))``. The
   loop walks D in chunks of ``bk``: one loaded ``[bc, bk]`` x chunk feeds both the gate and the
   up dot (one reduction loop, two float32 ``[bc, bf]`` accumulators), and ``silu(a) * b`` is taken in
   registers before the single store.
2. ``y_XZD = h @ down``; grid ``(X, cdiv(Z, bc), cdiv(D, bd))``, the loop walks F in chunks of ``bk``.

Blocks. Triton wants every array inside a kernel to have power-of-two dims and ``tl.dot`` wants
each operand dim >= 16, so every block is a power of two, at least 16 and at most the dimension
rounded up to a power of two (a requested size is rounded down to a power of two). The knobs keep
the TPU kernel's names with GPU meanings: ``block_c`` rows per tile (default 64), ``block_f`` the
output columns of a tile (F columns of h in call 1, D columns of y in call 2; default 128),
``block_r`` the chunk of the reduction loops (D in call 1, F in call 2; default 64). At PhiMoE's
experts (D 4096, F 6400 = 50 x 128, bf16, Z 128) call 1 is a 4 x 2 x 50 grid of 64-step loops and
call 2 a 4 x 2 x 32 grid of 100-step loops: 400 and 256 programs, 2-3 waves on 132 SMs; 128-column
tiles divide 6400 (256 would not); two 64 x 128 float32 accumulators are 128 registers a thread at
4 warps. 64-row tiles rather than all of Z: twice the programs at Z 128 and a dead last tile at Z
256 with ~35% padding, for a second read of each weight tile, which the grid order (X fastest,
then row tiles) puts in the same wave, so it mostly hits L2 (the FFN is weight-bandwidth bound).
Pipeline stages: as many as fit in ~160 KiB of shared memory, 2 to 4. A dim the blocks do not
divide (F 6400 under a 256 block, Z < 16, D 96) is handled by masked loads (``other=0``) and
masked stores; nothing is padded or copied, and a mask is only emitted where a dim needs one.

Padding skip: ``count_X`` is an input read in the kernel. A row tile with ``c * bc >= count[g]``
loads nothing, runs no dot and stores zeros (a whole empty expert costs only its zero stores). In
a live tile the x (and h) loads are masked at ``count[g]``: padding rows are not read (their MMA
work is still done, on zeros) and come out exactly zero.

What it does not do: skip padding rows inside a live tile's MMA, fuse the two
calls (h takes a round trip through HBM: ``2 * X * Z * F`` elements, small next to the weights),
reuse one weight tile across row tiles except through L2, split the reduction across programs, autotune, or
differentiate (the caller wraps it in the reference's VJP). float32 inputs use IEEE dots, not TF32.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from edge_jax.layers.kernels import backend

pltr = backend.pltriton  # None on a JAX without Pallas's Triton backend (then backend.TRITON is False)
NAME = "expert_ffn"
DEFAULTS = (64, 128, 64)  # block_c, block_f, block_r
SMEM_BUDGET = 160 * 2**10  # shared memory for the pipelined loads of one program (H100: 227 KiB)
NUM_WARPS = 4


def _pow2(n: int, size: int) -> int:
    """``n`` rounded down to a power of two (at least 16), capped at :func:`backend.triton_dim` of ``size``."""
    n = 1 << (max(int(n), 1).bit_length() - 1)
    return min(max(backend.TRITON_MIN_DIM, n), backend.triton_dim(size))


def block_sizes(Z: int, D: int, F: int, block_c=None, block_f=None, block_r=None) -> dict:
    """The power-of-two blocks of both calls (module docstring): rows ``bc``, output columns
    ``bf`` (call 1, over F) and ``bd`` (call 2, over D), reduction chunks ``bk1`` (D) and ``bk2`` (F)."""
    c, f, r = (b or d for b, d in zip((block_c, block_f, block_r), DEFAULTS))
    return dict(bc=_pow2(c, Z), bf=_pow2(f, F), bd=_pow2(f, D), bk1=_pow2(r, D), bk2=_pow2(r, F))


def _stages(per_stage_bytes: int) -> int:
    return max(2, min(4, SMEM_BUDGET // per_stage_bytes))


def _iota(n: int, start):
    return start + lax.broadcasted_iota(jnp.int32, (n,), 0)


def _mask(rows, cols, shape):
    """A ``shape`` mask from an optional row and an optional column mask; None when neither is given."""
    if rows is None and cols is None:
        return None
    rows = jnp.ones((shape[0],), jnp.bool_) if rows is None else rows
    cols = jnp.ones((shape[1],), jnp.bool_) if cols is None else cols
    return rows[:, None] & cols[None, :]


def _load(ref, mask):
    return ref[...] if mask is None else pltr.load(ref, mask=mask, other=0)


def _matmul_tile(count_ref, a_ref, *refs, depth, width, Z, bk, epilogue, precision):
    """``o = epilogue(a @ b for b in b_refs)`` for this program's ``[bc, bn]`` output tile of
    expert ``g``: ``a_ref`` the ``[bc, depth]`` row block, each ``b_ref`` a ``[depth, bn]`` column block
    (``width`` columns in all), the reduction over ``depth`` in chunks of ``bk``; rows ``>= count[g]``
    are masked out of the ``a`` loads; ``Z`` the rows (capacity) of the whole expert slice."""
    *b_refs, o_ref = refs
    g, c, n = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    bc, bn = o_ref.shape
    count = count_ref[g]
    rows = _iota(bc, c * bc)
    cols = _iota(bn, n * bn) < width if width % bn else None
    store_mask = _mask(rows < Z if Z % bc else None, cols, (bc, bn))
    live = c * bc < count

    @pl.when(live)
    def _():
        def step(k, accs):
            ks = _iota(bk, k * bk) < depth if depth % bk else None
            a = _load(a_ref.at[:, pl.ds(k * bk, bk)], _mask(rows < count, ks, (bc, bk)))
            w_mask = _mask(ks, cols, (bk, bn))
            return tuple(acc + jnp.dot(a, _load(b_ref.at[pl.ds(k * bk, bk), :], w_mask),
                                       preferred_element_type=jnp.float32, precision=precision)
                         for acc, b_ref in zip(accs, b_refs))

        zero = jnp.zeros((bc, bn), jnp.float32)
        accs = lax.fori_loop(0, pl.cdiv(depth, bk), step, (zero,) * len(b_refs))
        _store(o_ref, epilogue(*accs).astype(o_ref.dtype), store_mask)

    @pl.when(jnp.logical_not(live))
    def _():
        _store(o_ref, jnp.zeros((bc, bn), o_ref.dtype), store_mask)


def _store(ref, value, mask):
    if mask is None:
        ref[...] = value
    else:
        pltr.store(ref, value, mask=mask)


def _swiglu(a, b):
    return a * jax.nn.sigmoid(a) * b


def expert_ffn_gpu(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, *, block_c=None, block_f=None, block_r=None,
                   interpret=None):
    """``[X, Z, D]`` in x's dtype: each expert's SwiGLU on its first ``count_X[g]`` rows, zeros
    below (module docstring). ``interpret`` None: the backend's choice (:func:`backend.interpret`)."""
    X, Z, D = x_XZD.shape
    F = gate_XDF.shape[-1]
    dt = x_XZD.dtype
    b = block_sizes(Z, D, F, block_c, block_f, block_r)
    bc, bf, bd, bk1, bk2 = b["bc"], b["bf"], b["bd"], b["bk1"], b["bk2"]
    interpret = backend.interpret(NAME) if interpret is None else interpret
    count_X = jnp.clip(count_X.astype(jnp.int32), 0, Z)
    precision = lax.Precision.HIGHEST if dt == jnp.float32 else None  # IEEE, not TF32, for float32
    size = jnp.dtype(dt).itemsize
    count_spec = pl.BlockSpec((X,), lambda g, c, n: (0,))

    h_XZF = pl.pallas_call(
        functools.partial(_matmul_tile, depth=D, width=F, Z=Z, bk=bk1, epilogue=_swiglu, precision=precision),
        out_shape=jax.ShapeDtypeStruct((X, Z, F), dt), grid=(X, pl.cdiv(Z, bc), pl.cdiv(F, bf)),
        in_specs=[count_spec, pl.BlockSpec((None, bc, D), lambda g, c, f: (g, c, 0)),
                  pl.BlockSpec((None, D, bf), lambda g, c, f: (g, 0, f)),
                  pl.BlockSpec((None, D, bf), lambda g, c, f: (g, 0, f))],
        out_specs=pl.BlockSpec((None, bc, bf), lambda g, c, f: (g, c, f)),
        compiler_params=backend.triton_params(NUM_WARPS, _stages((bc + 2 * bf) * bk1 * size)),
        interpret=interpret, name="expert_ffn_gate_up",
    )(count_X, x_XZD, gate_XDF, up_XDF)

    return pl.pallas_call(
        functools.partial(_matmul_tile, depth=F, width=D, Z=Z, bk=bk2, epilogue=lambda acc: acc, precision=precision),
        out_shape=jax.ShapeDtypeStruct((X, Z, D), dt), grid=(X, pl.cdiv(Z, bc), pl.cdiv(D, bd)),
        in_specs=[count_spec, pl.BlockSpec((None, bc, F), lambda g, c, d: (g, c, 0)),
                  pl.BlockSpec((None, F, bd), lambda g, c, d: (g, 0, d))],
        out_specs=pl.BlockSpec((None, bc, bd), lambda g, c, d: (g, c, d)),
        compiler_params=backend.triton_params(NUM_WARPS, _stages((bc + bd) * bk2 * size)),
        interpret=interpret, name="expert_ffn_down",
    )(count_X, h_XZF, down_XFD)
