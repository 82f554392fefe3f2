"""HF RoPE parameters (``rope_parameters`` / ``rope_scaling``) <-> our ``model.rope_*`` keys
(:mod:`edge_jax.layers.rope`): ``default``, ``linear``, ``llama3``, ``longrope`` (Phi-3, PhiMoE's
``short_mscale``/``long_mscale``) and ``yarn``; other ``rope_type`` values are :class:`Unsupported`."""
from __future__ import annotations

from typing import Mapping

from edge_jax.interop.family import Unsupported
from edge_jax.layers.rope import Rope

KINDS = ("default", "linear", "llama3", "longrope", "yarn")


def _original_max_len(rp: Mapping, c: Mapping) -> int:
    """As transformers' ``standardize_rope_params``: a top-level ``original_max_position_embeddings``
    (Phi-3) first, then the RoPE parameters', then ``max_position_embeddings``."""
    for value in (c.get("original_max_position_embeddings"), rp.get("original_max_position_embeddings"),
                  c.get("max_position_embeddings")):
        if value is not None:
            return int(value)
    raise Unsupported("unsupported RoPE settings: no original_max_position_embeddings nor max_position_embeddings")


def rope_keys(rp: Mapping, c: Mapping) -> dict:
    """``model.*`` RoPE keys from the HF RoPE parameters ``rp`` (``rope_type``, ``rope_theta``, the
    scaling's own) of config ``c``; :class:`Unsupported` names a scaling we do not implement."""
    kind = rp["rope_type"]
    if kind not in KINDS:
        raise Unsupported(f"unsupported rope scaling rope_type={kind!r}; edge_jax takes {', '.join(map(repr, KINDS))}")
    if float(rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)) or 1.0) != 1.0:
        raise Unsupported("unsupported setting partial_rotary_factor != 1 (RoPE on every head dimension only)")
    keys = {"rope_theta": float(rp["rope_theta"])}
    if kind == "default":
        return keys
    keys["rope_scaling"] = kind
    factor = rp.get("factor")
    if kind in ("linear", "llama3"):
        keys["rope_factor"] = float(factor)
    if kind == "linear":
        return keys
    original = keys["rope_original_max_len"] = _original_max_len(rp, c)
    if kind in ("longrope", "yarn") and factor is None:  # transformers: the ratio of the two lengths
        factor = c["max_position_embeddings"] / original
    keys["rope_factor"] = float(factor)
    if kind == "llama3":
        keys.update(rope_low_freq_factor=float(rp["low_freq_factor"]),
                    rope_high_freq_factor=float(rp["high_freq_factor"]))
    attention = rp.get("attention_factor")
    if kind == "longrope":
        keys.update(rope_short_factor=tuple(map(float, rp["short_factor"])),
                    rope_long_factor=tuple(map(float, rp["long_factor"])))
        mscales = {rp[k] for k in ("short_mscale", "long_mscale") if rp.get(k) is not None}
        if len(mscales) > 1:
            raise Unsupported(f"unsupported setting short_mscale={rp['short_mscale']} != long_mscale="
                              f"{rp['long_mscale']} (one attention factor for both)")
        attention = mscales.pop() if mscales else attention
    if kind == "yarn":
        keys.update(rope_beta_fast=float(rp.get("beta_fast") or 32), rope_beta_slow=float(rp.get("beta_slow") or 1),
                    rope_mscale=float(rp.get("mscale") or 0), rope_mscale_all_dim=float(rp.get("mscale_all_dim") or 0),
                    rope_truncate=bool(rp.get("truncate", True)))
    if attention is not None:
        keys["rope_attention_factor"] = float(attention)
    return keys


def rope_hf(cfg) -> dict:
    """The HF ``rope_parameters`` of our model's RoPE (transformers computes the same frequencies and factor)."""
    r = Rope.of(cfg)
    out = {"rope_type": r.scaling, "rope_theta": float(r.theta)}
    if r.scaling == "default":
        return out
    out["factor"] = float(r.factor)
    if r.scaling == "linear":
        return out
    out["original_max_position_embeddings"] = int(r.original_max_len)
    if r.scaling == "llama3":
        out.update(low_freq_factor=float(r.low_freq_factor), high_freq_factor=float(r.high_freq_factor))
    if r.scaling == "longrope":
        out.update(short_factor=list(r.short_factor), long_factor=list(r.long_factor))
    if r.scaling == "yarn":
        out.update(beta_fast=float(r.beta_fast), beta_slow=float(r.beta_slow))
        out.update({k: float(v) for k, v in (("mscale", r.mscale), ("mscale_all_dim", r.mscale_all_dim)) if v})
        if not r.truncate:
            out["truncate"] = False
    if r.attention_factor:
        out["attention_factor"] = float(r.attention_factor)
    return out
