"""Which implementation runs a hot path: the ``model.kernels`` switch and the backends' facts.

``model.kernels``:

- ``xla`` (default): the plain jnp path everywhere (what every committed result used);
- ``pallas``: our Pallas kernel for every hot path that has one; compiled by Mosaic on TPU and by
  Triton on GPU, and run by the Pallas interpreter on a backend the kernel has no lowering for
  (CPU: the tests' way of checking it; slow, never a speed path). Plain causal attention takes
  the library kernel of the backend (:mod:`edge_jax.layers.kernels.flash`);
- ``auto``: the kernel only on a platform where it was measured faster than the XLA path (:data:`FASTER`),
  the XLA path elsewhere, with one warning line per kernel and process saying why.

Each of our kernels has two Pallas variants behind one function: a Mosaic TPU one
(``jax.experimental.pallas.tpu``: scalar prefetch, VMEM scratch accumulators, sequential grid axes)
and a GPU one written for Pallas's Triton backend (``jax.experimental.pallas.triton``: one program
per output tile, loops inside the kernel, masked loads). :func:`gpu_variant` says which one a traced
step takes: the GPU one when the step is for a GPU, the TPU one otherwise (also when interpreted on
CPU). Why Triton and not Mosaic GPU (docs/kernels.md, "GPU"): the Triton variant's body is plain
Pallas that the generic interpreter runs on CPU and that ``jax.export`` lowers for CUDA on a CPU
machine, so CI checks both what it computes and that it lowers; a Mosaic GPU kernel is written
against Hopper's warpgroup MMA, TMA and barriers, which the generic Pallas lowering does not take.
JAX 0.11 deprecates the Triton backend (to be removed in a later release): where
``jax.experimental.pallas.triton`` no longer imports, :data:`TRITON` is False and on GPU ``auto``
keeps the XLA path for our kernels (cuDNN stays the GPU's attention kernel).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging

import jax

from edge_jax.errors import ConfigError, unknown
from edge_jax.layers.kernels import KERNEL_MODES
from edge_jax.registry import SECTIONS, Section

try:
    from jax.experimental.pallas import triton as pltriton
except ImportError:  # a JAX that has dropped Pallas's Triton backend
    pltriton = None

OURS = frozenset({"expert_ffn", "mla_decode", "segment_attention"})
TRITON = pltriton is not None
# the custom call a Pallas Triton kernel lowers to (named by JAX 0.11; the same string before)
TRITON_CALL = getattr(pltriton, "CUSTOM_CALL_TARGET_NAME", "__gpu$xla.gpu.triton")
# platform -> the kernels that lower natively there (the rest run interpreted under ``pallas``)
NATIVE = {"tpu": OURS | {"flash"}, "gpu": (OURS if TRITON else frozenset()) | {"flash"}}
# platform -> the kernels ``auto`` runs: those measured faster than the XLA path there. On an H200
# (docs/kernels.md, "On an NVIDIA H200": `edge-jax bench kernels`, bfloat16, the papers' shapes) the
# Triton segment_attention ran 1.27x to 4.89x XLA's speed and mla_decode 2.62x to 13.92x, expert_ffn
# 0.92x to 1.01x: XLA keeps the expert FFN on GPU. No kernel of ours has been timed on a TPU yet, so
# auto keeps XLA for all three there. ``flash`` is the platform library's own kernel (cuDNN, splash).
FASTER = {"gpu": (frozenset({"mla_decode", "segment_attention"}) if TRITON else frozenset()) | {"flash"},
          "tpu": frozenset({"flash"})}

log = logging.getLogger(__name__)


_TARGET: contextvars.ContextVar = contextvars.ContextVar("edge_jax_kernel_target", default=None)


@contextlib.contextmanager
def targeting(name: str | None):
    """While a step is traced inside this block, the kernels are chosen for platform ``name``
    (``tpu`` when ``edge-jax compile`` lowers for a TPU slice from a CPU process); None: no change."""
    token = _TARGET.set(name)
    try:
        yield
    finally:
        _TARGET.reset(token)


_EMULATED: contextvars.ContextVar = contextvars.ContextVar("edge_jax_kernel_emulated", default=False)


@contextlib.contextmanager
def emulating(name: str):
    """:func:`targeting` ``name``, with every kernel run by the Pallas interpreter: how the tests run
    the GPU variants, wired into whole models, on a CPU."""
    token = _EMULATED.set(True)
    try:
        with targeting(name):
            yield
    finally:
        _EMULATED.reset(token)


def platform() -> str:
    """``cpu``, ``gpu`` or ``tpu``: the platform the traced step is for (:func:`targeting`), by
    default the default backend's."""
    return _TARGET.get() or jax.default_backend()


def native(kernel: str) -> bool:
    """Whether ``kernel`` lowers natively (not interpreted) on this platform."""
    return kernel in NATIVE.get(platform(), frozenset())


def faster(kernel: str) -> bool:
    """Whether ``kernel`` was measured faster than the XLA path on this platform (:data:`FASTER`)."""
    return kernel in FASTER.get(platform(), frozenset())


@functools.cache
def _warn_once(kernel: str, where: str, has_native: bool) -> None:
    why = "not measured faster than the XLA path there" if has_native else "no native kernel there"
    log.warning("model.kernels=auto: %s keeps the XLA path on %s (%s); model.kernels=pallas forces the kernel",
                kernel, where, why)


def use_pallas(mode: str, kernel: str) -> bool:
    """Whether ``kernel`` runs as Pallas under ``model.kernels=mode`` on this platform."""
    if mode == "xla":
        return False
    if mode == "pallas":
        return True
    if mode == "auto":
        if not faster(kernel):
            _warn_once(kernel, platform(), native(kernel))
        return faster(kernel)
    raise ConfigError(unknown("model.kernels value", mode, KERNEL_MODES))


def gpu_variant() -> bool:
    """Whether our kernels take their GPU (Triton) variant: the traced step is for a GPU that has
    the Triton backend; elsewhere the TPU variant (compiled on TPU, interpreted on CPU)."""
    return platform() == "gpu" and TRITON


def triton_params(num_warps: int = 4, num_stages: int = 2):
    """``pallas_call``'s ``compiler_params`` for a GPU variant."""
    return pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages)


# Triton's shape rules, which every GPU variant obeys: each array inside a kernel has power-of-two
# dimensions, and each ``dot`` operand dimension is at least 16
TRITON_MIN_DIM = 16


def triton_dim(n: int) -> int:
    """The smallest power of two that is at least ``n`` and at least 16: a block or padded size."""
    return max(TRITON_MIN_DIM, 1 << max(int(n) - 1, 0).bit_length())


def check_triton_blocks(kernel: str, **blocks: int) -> None:
    """A one-line ValueError naming each block size that breaks Triton's rules, and a size that keeps them."""
    bad = [f"{name}={size}" for name, size in blocks.items() if triton_dim(size) != size]
    if bad:
        fix = ", ".join(f"{name}={triton_dim(size)}" for name, size in blocks.items() if triton_dim(size) != size)
        raise ValueError(f"{kernel}: {', '.join(bad)} is not a power of two >= {TRITON_MIN_DIM}; Triton blocks must "
                         f"be powers of two >= {TRITON_MIN_DIM}, e.g. {fix}")


def pad_axis(x, axis: int, n: int):
    """``x`` zero-padded at the end of ``axis`` to size ``n`` (itself when it has that size): how a GPU
    variant brings a dimension to :func:`triton_dim`."""
    if x.shape[axis] == n:
        return x
    return jax.numpy.pad(x, [(0, n - x.shape[axis]) if a == axis else (0, 0) for a in range(x.ndim)])


def interpret(kernel: str):
    """``pallas_call``'s ``interpret`` argument for ``kernel``: False where it lowers natively, else
    (or under :func:`emulating`) the generic interpreter (True)."""
    return _EMULATED.get() or not native(kernel)


@dataclasses.dataclass(frozen=True)
class KernelKeys:
    """``model.kernels``: ``xla``, ``pallas`` or ``auto`` (module docstring). It changes how the
    model computes, not what: a run may switch it when it resumes."""
    kernels: str = "xla"


def _validate(c) -> None:
    if c.model.kernels not in KERNEL_MODES:
        raise ConfigError(unknown("model.kernels value", c.model.kernels, KERNEL_MODES))


SECTIONS.register("kernels", Section("model", KernelKeys, _validate, resumable=("model.kernels",)))
