"""Rotary position embeddings (rotate-half convention, as in Llama/Qwen) and their scalings.

``model.rope_scaling`` picks a kind of :data:`ROPE_SCALINGS` (``default``, ``linear``, ``llama3``, ``longrope``,
``yarn``; transformers' ``ROPE_INIT_FUNCTIONS``); the ``model.rope_*`` keys (:class:`RopeKeys`) are its
parameters: ``rope_factor``, ``rope_original_max_len`` (pre-training length), Llama 3.1's
``rope_low/high_freq_factor``, YaRN's ``rope_beta_fast/slow``, ``rope_mscale[_all_dim]``, ``rope_truncate``,
LongRoPE's per-frequency ``rope_short/long_factor`` and ``rope_attention_factor`` (multiplies cos and sin; 0:
derived as transformers does). :class:`Rope` (``Rope.of(cfg)``) carries them, with ``model.rope_theta``, to layers.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Registry, Section


@dataclasses.dataclass(frozen=True)
class Scaling:
    """A RoPE scaling: ``inv_freq(rope, dim, long)`` -> the inverse frequencies [dim/2] (``long``: LongRoPE's
    set past the original length) and ``attention_factor(rope)``, the factor on cos and sin. The scaled kinds
    compute numpy float32 constants in transformers' op order (IEEE-rounded, unlike XLA, which may divide
    by a reciprocal); ``default`` keeps the jnp ops it had before scalings existed."""
    inv_freq: Callable
    attention_factor: Callable = lambda rope: 1.0


ROPE_SCALINGS: Registry[Scaling] = Registry("RoPE scaling", key="model.rope_scaling")


@dataclasses.dataclass(frozen=True)
class RopeKeys:
    """``model.*`` keys of the RoPE scaling (``model.rope_theta`` is the decoder's)."""
    rope_scaling: str = "default"  # ROPE_SCALINGS
    rope_factor: float = 1.0  # context extension factor (linear, llama3, longrope, yarn)
    rope_original_max_len: int = 0  # pre-training context length (llama3, longrope, yarn)
    rope_low_freq_factor: float = 1.0  # llama3
    rope_high_freq_factor: float = 4.0  # llama3
    rope_beta_fast: float = 32.0  # yarn
    rope_beta_slow: float = 1.0  # yarn
    rope_mscale: float = 0.0  # yarn (0: off)
    rope_mscale_all_dim: float = 0.0  # yarn (0: off); MLA's softmax scale grows by mscale(factor, this)^2
    rope_truncate: bool = True  # yarn: round the correction range to whole dimensions
    rope_attention_factor: float = 0.0  # on cos and sin (longrope, yarn); 0: derived
    rope_short_factor: tuple = ()  # longrope: per-frequency divisors up to rope_original_max_len
    rope_long_factor: tuple = ()  # longrope: past it


@dataclasses.dataclass(frozen=True)
class Rope:
    """RoPE settings a layer takes (static, hashable): ``theta`` and the scaling's parameters (the
    :class:`RopeKeys` without the ``rope_`` prefix)."""
    theta: float = 10_000.0
    scaling: str = "default"
    factor: float = 1.0
    original_max_len: int = 0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    truncate: bool = True
    attention_factor: float = 0.0
    short_factor: tuple = ()
    long_factor: tuple = ()

    @classmethod
    def of(cls, cfg) -> "Rope":
        """The settings of a model config (anything with ``rope_theta`` and the ``rope_*`` keys)."""
        values = {f.name[len("rope_"):]: getattr(cfg, f.name) for f in dataclasses.fields(RopeKeys)}
        for name in ("short_factor", "long_factor"):
            values[name] = tuple(float(v) for v in values[name])
        return cls(theta=float(cfg.rope_theta), **values)

    def inv_freq(self, dim: int, long: bool = False):
        """Inverse frequencies [dim/2] (float32) of a rotated width ``dim``."""
        return jnp.asarray(ROPE_SCALINGS.get(self.scaling).inv_freq(self, dim, long), jnp.float32)

    @property
    def cos_sin_factor(self) -> float:
        """What multiplies cos and sin (transformers' ``attention_scaling``)."""
        return float(self.attention_factor or ROPE_SCALINGS.get(self.scaling).attention_factor(self))

    @property
    def softmax_scale(self) -> float:
        """What multiplies MLA's softmax scale: DeepSeek-V2's ``mscale(factor, mscale_all_dim)**2`` under YaRN."""
        return _yarn_mscale(self.factor, self.mscale_all_dim) ** 2 if self.mscale_all_dim else 1.0

    def is_long(self, positions):
        """LongRoPE's switch as transformers' ``dynamic_rope_update``: max position + 1 past the original
        length (a traced bool); None for the other kinds."""
        if not self.long_factor:
            return None
        return jnp.max(positions) + 1 > self.original_max_len

    def cos_sin(self, positions_BT, dim: int, long=None):
        """cos and sin [B, T, dim/2] (float32) of ``position * inv_freq``, times :attr:`cos_sin_factor`
        (transformers' rotary embedding's first half). ``long``: LongRoPE's switch (default :meth:`is_long`)."""
        inv_freq = self.inv_freq(dim)
        if self.long_factor:
            long = self.is_long(positions_BT) if long is None else long
            inv_freq = jnp.where(long, self.inv_freq(dim, long=True), inv_freq)
        angles_BTk = positions_BT[..., None].astype(jnp.float32) * inv_freq
        cos, sin = jnp.cos(angles_BTk), jnp.sin(angles_BTk)
        if (a := self.cos_sin_factor) != 1.0:
            cos, sin = cos * a, sin * a
        return cos, sin

    def apply(self, x_BTHK, positions_BT, long=None):
        """Rotate the last axis of ``x`` (pairs x[i], x[i + dim/2]) by :meth:`cos_sin`; float32 inside."""
        cos, sin = self.cos_sin(positions_BT, x_BTHK.shape[-1], long)
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
        x = x_BTHK.astype(jnp.float32)
        x1, x2 = jnp.split(x, 2, axis=-1)
        out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        return out.astype(x_BTHK.dtype)


def _powers(rope: Rope, dim: int) -> np.ndarray:
    """theta^(2i/dim), float32 (the power rounded once from float64)."""
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    return (np.float64(rope.theta) ** exponents.astype(np.float64)).astype(np.float32)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _default(rope: Rope, dim: int, long: bool):
    """jnp ops: bit for bit the RoPE of edge_jax before scalings existed."""
    return 1.0 / (rope.theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))


def _llama3(rope: Rope, dim: int, long: bool):
    inv_freq = 1.0 / _powers(rope, dim)
    f, lo, hi, n = rope.factor, rope.low_freq_factor, rope.high_freq_factor, rope.original_max_len
    wavelen = (1 / inv_freq) * (2 * math.pi)  # torch's scalar / tensor: reciprocal, then times the scalar
    scaled = np.where(wavelen > n / lo, inv_freq / f, inv_freq)
    smooth = ((1 / wavelen) * n - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / f + smooth * scaled
    medium = ~(wavelen < n / hi) & ~(wavelen > n / lo)
    return np.where(medium, smoothed, scaled)


def _longrope(rope: Rope, dim: int, long: bool):
    factors = np.asarray(rope.long_factor if long else rope.short_factor, np.float32)
    if factors.shape != (dim // 2,):
        raise ValueError(f"LongRoPE factors have {factors.shape[0]} entries for a rotated width {dim}; need {dim // 2}")
    return 1.0 / (factors * _powers(rope, dim))


def _longrope_attention(rope: Rope) -> float:
    f = rope.factor
    return 1.0 if f <= 1.0 else math.sqrt(1 + math.log(f) / math.log(rope.original_max_len))


def yarn_range(rope: Rope, dim: int) -> tuple[float, float]:
    """YaRN's correction range: the dimensions (of ``dim/2``) between full extrapolation and full interpolation."""
    def correction_dim(rotations):
        return dim * math.log(rope.original_max_len / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))
    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def _yarn(rope: Rope, dim: int, long: bool):
    pos_freqs = _powers(rope, dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (rope.factor * pos_freqs)
    low, high = yarn_range(rope, dim)
    high = high + 0.001 if low == high else high  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / np.float32(high - low), 0, 1)
    keep = 1 - ramp  # the extrapolated share
    return interpolation * (1 - keep) + extrapolation * keep


def _yarn_attention(rope: Rope) -> float:
    if rope.mscale and rope.mscale_all_dim:
        return float(_yarn_mscale(rope.factor, rope.mscale) / _yarn_mscale(rope.factor, rope.mscale_all_dim))
    return _yarn_mscale(rope.factor)


ROPE_SCALINGS.register("default", Scaling(_default))
ROPE_SCALINGS.register("linear", Scaling(lambda rope, dim, long: 1.0 / _powers(rope, dim) / rope.factor))
ROPE_SCALINGS.register("llama3", Scaling(_llama3))
ROPE_SCALINGS.register("longrope", Scaling(_longrope, _longrope_attention))
ROPE_SCALINGS.register("yarn", Scaling(_yarn, _yarn_attention))


def inv_freq_reference(rope: Rope, dim: int, long: bool = False) -> np.ndarray:
    """Each kind's inverse frequency written out per frequency i in float64 (transformers' formulas)."""
    out = []
    for i in range(dim // 2):
        base = rope.theta ** (2 * i / dim)
        if rope.scaling == "linear":
            out.append(1 / (base * rope.factor))
        elif rope.scaling == "llama3":
            wavelen, n = 2 * math.pi * base, rope.original_max_len
            if wavelen < n / rope.high_freq_factor:
                out.append(1 / base)
            elif wavelen > n / rope.low_freq_factor:
                out.append(1 / (base * rope.factor))
            else:
                s = (n / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
                out.append((1 - s) / (base * rope.factor) + s / base)
        elif rope.scaling == "longrope":
            out.append(1 / ((rope.long_factor if long else rope.short_factor)[i] * base))
        elif rope.scaling == "yarn":
            low, high = yarn_range(rope, dim)
            extrapolated = 1 - min(max((i - low) / (high - low if high != low else 0.001), 0), 1)
            out.append(extrapolated / base + (1 - extrapolated) / (base * rope.factor))
        else:
            out.append(1 / base)
    return np.asarray(out)


def rope_reference(x_BTHK, positions_BT, rope: Rope) -> np.ndarray:
    """:meth:`Rope.apply` one vector at a time in float64: pairs (x[i], x[i + dim/2]) rotated by
    ``position * inv_freq[i]`` and scaled by the attention factor."""
    x, pos = np.asarray(x_BTHK, np.float64), np.asarray(positions_BT)
    dim = x.shape[-1]
    inv = inv_freq_reference(rope, dim, long=bool(rope.long_factor) and pos.max() + 1 > rope.original_max_len)
    a, out = rope.cos_sin_factor, np.zeros_like(x)
    for b, t, h in np.ndindex(*x.shape[:3]):
        for i in range(dim // 2):
            c, s = a * math.cos(pos[b, t] * inv[i]), a * math.sin(pos[b, t] * inv[i])
            x1, x2 = x[b, t, h, i], x[b, t, h, i + dim // 2]
            out[b, t, h, i], out[b, t, h, i + dim // 2] = x1 * c - x2 * s, x2 * c + x1 * s
    return out


def _validate(c) -> None:
    m = c.model
    kind = m.rope_scaling
    ROPE_SCALINGS.check(kind)

    def need(ok: bool, key: str, what: str, fix: str):
        if not ok:
            shown = f"<{len(m[key])} values>" if isinstance(m[key], (tuple, list)) else m[key]
            raise ConfigError(f"model.{key}={shown} {what} with model.rope_scaling={kind}; {fix}")

    if m.rope_theta <= 0:
        raise ConfigError(f"model.rope_theta={m.rope_theta} must be positive; set e.g. model.rope_theta=10000")
    need(m.rope_attention_factor >= 0, "rope_attention_factor", "must be >= 0 (0: derived)", "set it >= 0")
    if kind != "default":
        need(m.rope_factor > 0, "rope_factor", "must be positive", "set e.g. model.rope_factor=8")
    if kind in ("llama3", "longrope", "yarn"):
        need(m.rope_original_max_len > 0, "rope_original_max_len", "must be the positive pre-training length",
             "set e.g. model.rope_original_max_len=8192")
    if kind == "llama3":
        need(0 < m.rope_low_freq_factor < m.rope_high_freq_factor, "rope_low_freq_factor",
             f"must be positive and below model.rope_high_freq_factor={m.rope_high_freq_factor}",
             "Llama 3.1 uses 1 and 4")
    if kind == "yarn":
        need(0 < m.rope_beta_slow < m.rope_beta_fast, "rope_beta_slow",
             f"must be positive and below model.rope_beta_fast={m.rope_beta_fast}", "YaRN uses 1 and 32")
    dim = m.d_rope if m.attention == "mla" else m.head_dim  # the rotated width
    for key in ("rope_short_factor", "rope_long_factor"):
        if kind == "longrope":
            need(len(m[key]) == dim // 2, key, f"needs {dim // 2} entries (rotated width / 2), has {len(m[key])}",
                 "give one factor per frequency")
        else:
            need(not m[key], key, "applies to longrope only", f"leave model.{key} empty")
    for key in ("rope_mscale", "rope_mscale_all_dim"):
        if kind != "yarn":
            need(not m[key], key, "applies to yarn only", f"set model.{key}=0")


SECTIONS.register("rope", Section("model", RopeKeys, _validate))
