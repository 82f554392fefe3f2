"""HF RoPE parameters (``rope_parameters`` / ``rope_scaling``) <-> our ``model.rope_*`` keys."""
from __future__ import annotations

from typing import Mapping

from edge_jax.interop.family import Unsupported


def rope_keys(rp: Mapping, c: Mapping) -> dict:
    """``model.*`` RoPE keys from the HF RoPE parameters ``rp`` (``rope_type``, ``rope_theta``, the
    scaling's own) of config ``c``; :class:`Unsupported` names a scaling we do not implement."""
    if rp["rope_type"] != "default":
        raise Unsupported(f"unsupported rope scaling rope_type={rp['rope_type']!r}; edge_jax takes 'default'")
    if float(rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)) or 1.0) != 1.0:
        raise Unsupported("unsupported setting partial_rotary_factor != 1 (RoPE on every head dimension only)")
    return {"rope_theta": float(rp["rope_theta"])}


def rope_hf(cfg) -> dict:
    """The HF ``rope_parameters`` of our model's RoPE."""
    return {"rope_type": "default", "rope_theta": float(cfg.rope_theta)}
