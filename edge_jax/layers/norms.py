"""RMSNorm, computed in float32 and cast back to the input dtype."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


def rms_normalize(x, eps: float):
    x32 = x.astype(jnp.float32)
    return x32 * jnp.reciprocal(jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps))


class RMSNorm(nn.Module):
    """``y = x / rms(x) * scale`` with a learned per-feature scale initialised to one."""
    eps: float = 1e-6
    axis_name: str = "norm"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
                           (x.shape[-1],), jnp.dtype(self.param_dtype))
        return (rms_normalize(x, self.eps) * scale.astype(jnp.float32)).astype(x.dtype)
