"""Which implementation runs a hot path: the ``model.kernels`` switch and the backends' facts.

``model.kernels``:

- ``xla`` (default): the plain jnp path everywhere (what every committed result used);
- ``pallas``: our Pallas kernel for every hot path that has one; compiled by Mosaic on TPU, and
  run by the Pallas interpreter on a backend the kernel has no lowering for (CPU: the tests'
  way of checking it; slow, never a speed path). Plain causal attention takes the library kernel
  of the backend (:mod:`edge_jax.layers.kernels.flash`);
- ``auto``: the kernel where the backend compiles it, the XLA path elsewhere, with one warning
  line per kernel and process saying so.

The kernels are written for Mosaic TPU (``jax.experimental.pallas.tpu``: scalar prefetch, VMEM
scratch accumulators, sequential grid axes). On GPU the installed JAX lowers ``pallas_call``
through Mosaic GPU by default, and the Triton path is deprecated from JAX 0.11; neither accepts a
TPU grid spec, and a GPU variant written without a GPU to check it would be untested code, so on
GPU ``auto`` keeps XLA for our kernels (cuDNN attention is the GPU kernel) until a GPU session
adds and measures Mosaic GPU variants (docs/kernels.md).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging

import jax

from edge_jax.errors import ConfigError, unknown
from edge_jax.registry import SECTIONS, Section

KERNEL_MODES = ("xla", "pallas", "auto")
# platform -> the kernels that lower natively there (the rest run interpreted under ``pallas``)
NATIVE = {"tpu": frozenset({"expert_ffn", "mla_decode", "segment_attention", "flash"}),
          "gpu": frozenset({"flash"})}

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


def platform() -> str:
    """``cpu``, ``gpu`` or ``tpu``: the platform the traced step is for (:func:`targeting`), by
    default the default backend's."""
    return _TARGET.get() or jax.default_backend()


def native(kernel: str) -> bool:
    """Whether ``kernel`` lowers natively (not interpreted) on this platform."""
    return kernel in NATIVE.get(platform(), frozenset())


@functools.cache
def _warn_once(kernel: str, where: str) -> None:
    log.warning("model.kernels=auto: no %s kernel for %s here, using the XLA path", kernel, where)


def use_pallas(mode: str, kernel: str) -> bool:
    """Whether ``kernel`` runs as Pallas under ``model.kernels=mode`` on this platform."""
    if mode == "xla":
        return False
    if mode == "pallas":
        return True
    if mode == "auto":
        if not native(kernel):
            _warn_once(kernel, platform())
        return native(kernel)
    raise ConfigError(unknown("model.kernels value", mode, KERNEL_MODES))


def interpret(kernel: str):
    """``pallas_call``'s ``interpret`` argument for ``kernel``: False where it lowers natively, else
    the generic interpreter (True)."""
    return not native(kernel)


@dataclasses.dataclass(frozen=True)
class KernelKeys:
    """``model.kernels``: ``xla``, ``pallas`` or ``auto`` (module docstring). It changes how the
    model computes, not what: a run may switch it when it resumes."""
    kernels: str = "xla"


def _validate(c) -> None:
    if c.model.kernels not in KERNEL_MODES:
        raise ConfigError(unknown("model.kernels value", c.model.kernels, KERNEL_MODES))


SECTIONS.register("kernels", Section("model", KernelKeys, _validate, resumable=("model.kernels",)))
