"""Feed-forward blocks, selected by ``model.ffn`` from :data:`FFN_KINDS`.

- ``swiglu``: ``down(silu(gate(x)) * up(x))`` (gated; Qwen3, Llama).
- ``relu2``: ``down(max(0, up(x))^2)`` without a gate (PLM eq. 3, Primer).
- ``relu`` / ``gelu``: ``down(act(up(x)))`` without a gate.

A new kind is one registration: ``FFN_KINDS.register("name", FFNKind(activation, gated))``.

The activation ``a`` (the input of ``down``) can be masked for the sparsity analysis (PLM §7.2,
Algorithm 1): with ``mask_ratio`` r > 0, the elements with ``|a| <= T_r`` are set to zero, where
``T_r`` is the ``ceil(r n)``-th smallest ``|a|`` over all n elements of this call (every token and
channel), so at least a fraction r is zero afterwards. ``mask_ratio`` may be a traced scalar; ``None`` or 0 masks
nothing. Each call also sows the fraction of exactly-zero activations into ``"intermediates"``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class FFNKind:
    """``activation`` applied to ``up(x)``, or with ``gated`` to ``gate(x)`` and multiplied by ``up(x)``."""
    activation: Callable
    gated: bool = False


FFN_KINDS: Registry[FFNKind] = Registry("FFN kind", key="model.ffn")
FFN_KINDS.register("swiglu", FFNKind(nn.silu, gated=True))
FFN_KINDS.register("relu2", FFNKind(lambda x: jnp.square(nn.relu(x))))
FFN_KINDS.register("relu", FFNKind(nn.relu))
FFN_KINDS.register("gelu", FFNKind(lambda x: nn.gelu(x, approximate=False)))


def dense(features, axes, name, std, dtype, param_dtype):
    return nn.Dense(features, use_bias=False, name=name, dtype=jnp.dtype(dtype),
                    param_dtype=jnp.dtype(param_dtype),
                    kernel_init=nn.with_logical_partitioning(nn.initializers.normal(std), axes))


def _kept_count(n: int, ratio):
    """How many elements a ratio masks: ``ceil(ratio * n)``, 0 for ratio <= 0."""
    return jnp.ceil(jnp.clip(jnp.asarray(ratio, jnp.float32), 0.0, 1.0) * n).astype(jnp.int32)


def mask_smallest(a, ratio):
    """Zero the ``ceil(ratio * n)`` smallest-magnitude elements of ``a`` (and their ties): the
    threshold is the k-th smallest ``|a|``, found exactly by bisection over float32 bit patterns
    (non-negative floats order like their int32 bits), 32 counting passes instead of a sort."""
    mag = jnp.abs(a.astype(jnp.float32))
    bits = jax.lax.bitcast_convert_type(mag.reshape(-1), jnp.int32)
    k = _kept_count(bits.size, ratio)

    def halve(_, lo_hi):  # invariant: count(bits <= lo) < k <= count(bits <= hi)
        lo, hi = lo_hi
        mid = lo + (hi - lo) // 2
        enough = jnp.sum(bits <= mid, dtype=jnp.int32) >= k
        return jnp.where(enough, lo, mid), jnp.where(enough, mid, hi)

    _, hi = jax.lax.fori_loop(0, 32, halve, (jnp.int32(-1), jnp.max(bits)))
    threshold = jax.lax.bitcast_convert_type(hi, jnp.float32)
    return jnp.where((mag <= threshold) & (k > 0), jnp.zeros_like(a), a)


def mask_smallest_reference(a, ratio):
    """:func:`mask_smallest` by sorting: the threshold is ``sort(|a|)[k - 1]``."""
    mag = jnp.abs(a.astype(jnp.float32))
    k = _kept_count(mag.size, ratio)
    threshold = jnp.sort(mag.reshape(-1))[jnp.maximum(k - 1, 0)]
    return jnp.where((mag <= threshold) & (k > 0), jnp.zeros_like(a), a)


class FFN(nn.Module):
    """``kind`` in :data:`FFN_KINDS`; params ``up``, ``down`` and, for gated kinds, ``gate``."""
    kind: str
    d_ff: int
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x_BTD, mask_ratio=None):
        kind = FFN_KINDS.get(self.kind)
        a = (self.init_std, self.dtype, self.param_dtype)
        up_BTF = dense(self.d_ff, ("embed", "mlp"), "up", *a)(x_BTD)
        if kind.gated:
            act_BTF = kind.activation(dense(self.d_ff, ("embed", "mlp"), "gate", *a)(x_BTD)) * up_BTF
        else:
            act_BTF = kind.activation(up_BTF)
        if mask_ratio is not None:
            act_BTF = mask_smallest(act_BTF, mask_ratio)
        self.sow("intermediates", "zero_fraction", jnp.mean((act_BTF == 0).astype(jnp.float32)))
        return dense(x_BTD.shape[-1], ("mlp", "embed"), "down", *a)(act_BTF)
