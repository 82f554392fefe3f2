"""Grouped capacity expert FFN (NPUMoE §4.2), kernel name ``expert_ffn``.

A static group runs ``X`` SwiGLU experts at once, each on its own zero-padded capacity slice:
``y[g] = (silu(x[g] @ gate[g]) * (x[g] @ up[g])) @ down[g]`` with ``x_XZD`` [X, Z, D]. Expert
``g``'s kept token copies fill rows ``0..count[g]-1`` of its slice (``execute.pack`` ranks them);
the rest is padding, ~35% of the rows in the paper's workloads.

:func:`expert_ffn` (Pallas TPU): grid ``(X, Z / block_c, F / block_f)``, the F axis the sequential
reduction. One step holds a ``[block_c, D]`` row tile and the ``[D, block_f]`` gate and up tiles
and the ``[block_f, D]`` down tile of one expert; both up-projections run over the full D (one reduction
loop), ``silu(a) * b`` stays float32 in registers, and ``h @ down`` accumulates into a float32
``[block_c, D]`` VMEM scratch written out at the last F step. ``count_X`` is scalar-prefetched:

- a row tile with no valid row (``c * block_c >= count[g]``) skips the matmuls and writes zeros,
  and its index maps point at the blocks the previous step already holds, so the pipeline fetches
  neither its rows nor (for an empty expert) the expert's weights;
- inside a live tile the rows run in sub-blocks of ``block_r``; a sub-block past ``count[g]`` is
  skipped, so with the default ``block_c = Z`` the weights stream once per expert and the MXU
  still does not compute whole padding sub-blocks; rows ``>= count[g]`` come out zero.

Block sizes that do not divide ``Z`` (or ``F``) are lowered to the largest divisor that keeps the
TPU tiling (a multiple of 8 rows for 4-byte dtypes, 16 for 2-byte, and of 128 columns), or the full
dimension if there is none: no padded copy of the weights is ever made. The defaults are the same
on every backend: ``block_c = Z`` up to 512 rows, ``block_f`` 512, ``block_r`` 128 (one v5e MXU
pass); the interpreter on CPU wants few grid steps, which large blocks also give.

Training: a ``jax.custom_vjp`` whose backward is the VJP of :func:`expert_ffn_reference`
(recomputed from the inputs; ``count`` gets no gradient).

:func:`grouped_swiglu` is the switch ``execute.capacity_moe`` calls: the kernel under
``model.kernels`` pallas (or auto on TPU and GPU), else :func:`swiglu`, the XLA path. On a GPU the
kernel is the Triton variant, :mod:`edge_jax.layers.kernels.expert_ffn_gpu` (two calls: gate and up
fused in one reduction loop with SiLU·up in registers, then the down projection).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.expert_ffn_gpu import expert_ffn_gpu
from edge_jax.sharding import per_shard

NAME = "expert_ffn"
VMEM_LIMIT = 64 * 2**20  # above the scoped default (16-32 MiB); PhiMoE blocks need ~40 MiB


def swiglu(x_XZD, gate_XDF, up_XDF, down_XFD):
    """``X`` experts at once, each on its own ``[Z, d]`` slice (the XLA path)."""
    h_XZF = jax.nn.silu(jnp.einsum("xzd,xdf->xzf", x_XZD, gate_XDF)) * jnp.einsum("xzd,xdf->xzf", x_XZD, up_XDF)
    return jnp.einsum("xzf,xfd->xzd", h_XZF, down_XFD)


def expert_ffn_reference(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, *, block_c=None, block_f=None, block_r=None,
                         interpret=None):
    """:func:`swiglu` with the rows ``>= count[g]`` of each expert zeroed (block sizes ignored)."""
    valid_XZ1 = jnp.arange(x_XZD.shape[1])[None, :, None] < count_X[:, None, None]
    return jnp.where(valid_XZ1, swiglu(x_XZD, gate_XDF, up_XDF, down_XFD), 0).astype(x_XZD.dtype)


def _divisor(size: int, block: int, align: int) -> int:
    """The largest divisor of ``size`` that is at most ``block`` and a multiple of ``align``;
    ``size`` itself if it fits in ``block`` or no such divisor exists."""
    if size <= block:
        return size
    return next((b for b in range(block - block % align, 0, -align) if size % b == 0), size)


def block_sizes(Z: int, F: int, dtype, block_c: int | None = None, block_f: int | None = None,
                block_r: int | None = None) -> tuple[int, int, int]:
    """``(block_c, block_f, block_r)`` the kernel runs with for ``Z`` rows, width ``F`` and the
    activations' ``dtype`` (module docstring: defaults and the divisor rule)."""
    rows = 8 * max(1, 4 // jnp.dtype(dtype).itemsize)  # sublane tile: 8 rows of 32 bits
    bc = _divisor(Z, block_c or 512, rows)
    return bc, _divisor(F, block_f or 512, 128), _divisor(bc, block_r or 128, rows)


def _kernel(count_ref, src_ref, srcc_ref, x_ref, g_ref, u_ref, d_ref, o_ref, acc_ref, *, block_r: int):
    g, c, f = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    bc = acc_ref.shape[0]
    n = count_ref[g]

    @pl.when(f == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    for r in range(bc // block_r):  # static sub-blocks; those past the count are skipped
        rows = slice(r * block_r, (r + 1) * block_r)
        first = c * bc + r * block_r

        @pl.when(first < n)
        def _():
            x = x_ref[0, rows, :]
            a = jnp.dot(x, g_ref[0], preferred_element_type=jnp.float32)
            b = jnp.dot(x, u_ref[0], preferred_element_type=jnp.float32)
            h = a * jax.nn.sigmoid(a) * b
            valid = first + jax.lax.broadcasted_iota(jnp.int32, h.shape, 0) < n  # padding rows give zeros
            h = jnp.where(valid, h, 0).astype(d_ref.dtype)
            acc_ref[rows, :] += jnp.dot(h, d_ref[0], preferred_element_type=jnp.float32)

    @pl.when(f == pl.num_programs(2) - 1)
    def _():
        o_ref[0] = acc_ref[...].astype(o_ref.dtype)


def _pallas(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, block_c, block_f, block_r, interpret):
    X, Z, D = x_XZD.shape
    F = gate_XDF.shape[-1]
    bc, bf, br = block_sizes(Z, F, x_XZD.dtype, block_c, block_f, block_r)
    nf = F // bf
    count_X = jnp.clip(count_X.astype(jnp.int32), 0, Z)
    # where an empty tile points its blocks: the last expert at or before g with rows (src) and
    # that expert's last live row tile (srcc), i.e. exactly the blocks the previous grid step holds
    src_X = jax.lax.cummax(jnp.where(count_X > 0, jnp.arange(X, dtype=jnp.int32), 0))
    srcc_X = jnp.maximum((count_X[src_X] + bc - 1) // bc - 1, 0)

    def live(g, c, count):
        return c * bc < count[g]

    def x_map(g, c, f, count, src, srcc):
        on = live(g, c, count)
        return jnp.where(on, g, src[g]), jnp.where(on, c, srcc[g]), 0

    def up_map(g, c, f, count, src, srcc):
        on = live(g, c, count)
        return jnp.where(on, g, src[g]), 0, jnp.where(on, f, nf - 1)

    def down_map(g, c, f, count, src, srcc):
        on = live(g, c, count)
        return jnp.where(on, g, src[g]), jnp.where(on, f, nf - 1), 0

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=3, grid=(X, Z // bc, nf),
        in_specs=[pl.BlockSpec((1, bc, D), x_map), pl.BlockSpec((1, D, bf), up_map),
                  pl.BlockSpec((1, D, bf), up_map), pl.BlockSpec((1, bf, D), down_map)],
        out_specs=pl.BlockSpec((1, bc, D), lambda g, c, f, *_: (g, c, 0)),
        scratch_shapes=[pltpu.VMEM((bc, D), jnp.float32)])
    return pl.pallas_call(
        functools.partial(_kernel, block_r=br), out_shape=jax.ShapeDtypeStruct(x_XZD.shape, x_XZD.dtype),
        grid_spec=spec, interpret=backend.interpret(NAME) if interpret is None else interpret,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),
                                             vmem_limit_bytes=VMEM_LIMIT),
    )(count_X, src_X, srcc_X, x_XZD, gate_XDF, up_XDF, down_XFD)


def _forward(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, static):
    """The step's variant (:func:`backend.gpu_variant`): the Triton one for a GPU, else the TPU one."""
    if backend.gpu_variant():
        block_c, block_f, block_r, interpret = static
        return expert_ffn_gpu(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, block_c=block_c, block_f=block_f,
                              block_r=block_r, interpret=interpret)
    return _pallas(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, *static)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _expert_ffn(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, static):
    return _forward(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, static)


def _fwd(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, static):
    return _forward(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, static), (x_XZD, gate_XDF, up_XDF, down_XFD, count_X)


def _bwd(static, res, dy_XZD):
    *arrays, count_X = res
    _, vjp = jax.vjp(lambda *a: expert_ffn_reference(*a, count_X), *arrays)
    return (*vjp(dy_XZD), None)


_expert_ffn.defvjp(_fwd, _bwd)


def expert_ffn(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, *, block_c=None, block_f=None, block_r=None,
               interpret=None):
    """``[X, Z, D]``: each expert's SwiGLU on its first ``count_X[g]`` rows, zeros below (module
    docstring; on a GPU :mod:`edge_jax.layers.kernels.expert_ffn_gpu`, where the block sizes mean
    that variant's). ``interpret`` None: the backend's choice (:func:`backend.interpret`)."""
    return _expert_ffn(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, (block_c, block_f, block_r, interpret))


def grouped_swiglu(x_XZD, gate_XDF, up_XDF, down_XFD, count_X, mode: str = "xla"):
    """One static group's experts under ``model.kernels = mode``: :func:`expert_ffn` where it runs
    as Pallas, else :func:`swiglu` (whose padding rows are zero because the buffer's are)."""
    if backend.use_pallas(mode, NAME):
        # XLA cannot partition a Mosaic call. The MoE layer already runs each device's prefill chunks
        # per shard (no mesh is active inside); called on a mesh otherwise, every device runs the group
        whole = (None, None, None)
        return per_shard(expert_ffn, (whole, whole, whole, whole, (None,)), whole)(x_XZD, gate_XDF, up_XDF, down_XFD,
                                                                                 count_X)
    return swiglu(x_XZD, gate_XDF, up_XDF, down_XFD)
