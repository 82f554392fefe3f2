"""Norm kinds (``model.norm``, :data:`NORM_KINDS`) of the decoder's ``attn_norm``, ``ffn_norm`` and
``final_norm``; computed in float32 and cast back to the input dtype.

- ``rmsnorm`` (default): ``y = x / rms(x) * scale`` (params ``scale``).
- ``layernorm``: ``y = (x - mean) / sqrt(var + eps) * scale + bias`` with the biased variance, as
  torch's ``nn.LayerNorm`` (params ``scale``, ``bias``; Phi-3.5-MoE).

Both use ``model.norm_eps``. QK-norm and MLA's latent norms are always RMSNorm. A kind is a module
class taking ``(eps, axis_name, param_dtype, name=...)``; :func:`make_norm` builds one.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.registry import SECTIONS, Registry, Section

NORM_KINDS = Registry("norm kind", key="model.norm")


def rms_normalize(x, eps: float):
    x32 = x.astype(jnp.float32)
    return x32 * jnp.reciprocal(jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps))


def _feature_param(module: nn.Module, name: str, init, axis_name: str, width: int, param_dtype: str):
    return module.param(name, nn.with_logical_partitioning(init, (axis_name,)), (width,), jnp.dtype(param_dtype))


@NORM_KINDS.register("rmsnorm")
class RMSNorm(nn.Module):
    """``y = x / rms(x) * scale`` with a learned per-feature scale initialised to one."""
    eps: float = 1e-6
    axis_name: str = "norm"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x):
        scale = _feature_param(self, "scale", nn.initializers.ones, self.axis_name, x.shape[-1], self.param_dtype)
        return (rms_normalize(x, self.eps) * scale.astype(jnp.float32)).astype(x.dtype)


@NORM_KINDS.register("layernorm")
class LayerNorm(nn.Module):
    """``y = (x - mean(x)) / sqrt(var(x) + eps) * scale + bias`` (biased variance, torch's semantics);
    ``scale`` initialised to one, ``bias`` to zero."""
    eps: float = 1e-5
    axis_name: str = "norm"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x):
        d = x.shape[-1]
        scale = _feature_param(self, "scale", nn.initializers.ones, self.axis_name, d, self.param_dtype)
        bias = _feature_param(self, "bias", nn.initializers.zeros, self.axis_name, d, self.param_dtype)
        x32 = x.astype(jnp.float32)
        centred = x32 - jnp.mean(x32, axis=-1, keepdims=True)
        y = centred * jnp.reciprocal(jnp.sqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + self.eps))
        return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def make_norm(kind: str, eps: float, axis_name: str = "norm", param_dtype: str = "float32", name: str | None = None):
    """The norm module of kind ``kind`` (a name in :data:`NORM_KINDS`)."""
    return NORM_KINDS.get(kind)(eps, axis_name, param_dtype, name=name)


@dataclasses.dataclass(frozen=True)
class NormKeys:
    """``model.norm``: the kind of the decoder's pre-attention, pre-FFN and final norms."""
    norm: str = "rmsnorm"


def _validate(c) -> None:
    NORM_KINDS.check(c.model.norm)


SECTIONS.register("norm", Section("model", NormKeys, _validate))
