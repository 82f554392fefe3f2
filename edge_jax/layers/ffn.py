"""Feed-forward blocks. SwiGLU: ``down(silu(gate(x)) * up(x))``."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


def dense(features, axes, name, std, dtype, param_dtype):
    return nn.Dense(features, use_bias=False, name=name, dtype=jnp.dtype(dtype),
                    param_dtype=jnp.dtype(param_dtype),
                    kernel_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes))


class SwiGLU(nn.Module):
    d_ff: int
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BTD):
        a = (self.init_std, self.dtype, self.param_dtype)
        gate = dense(self.d_ff, ("embed", "mlp"), "gate", *a)(x_BTD)
        up = dense(self.d_ff, ("embed", "mlp"), "up", *a)(x_BTD)
        return dense(x_BTD.shape[-1], ("mlp", "embed"), "down", *a)(nn.silu(gate) * up)


def make_ffn(kind: str, d_ff: int, **kw) -> nn.Module:
    if kind == "swiglu":
        return SwiGLU(d_ff, **kw)
    raise ValueError(f"unknown ffn kind {kind!r}; valid: swiglu")
