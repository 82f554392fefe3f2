"""NPUMoE's ``moe.*`` keys: calibrated capacity plans (§4), beside the MoE layer's own execution keys
(``moe.strategy``, ``moe.chunk``, ``moe.drop``, ``moe.overflow``: :mod:`edge_jax.layers.moe.layer`).

``uniform`` gives every expert ``capacity`` rows per prefill chunk (0: the calibrated busiest
estimate I * base); ``npumoe`` uses the calibrated plan: static tiers (``tier_multipliers`` x base),
groups of ``group`` same-tier experts per call, and with ``residency`` the least popular experts on
the exact fallback path. ``plan``: a calibration file (``edge-jax moe calibrate``); empty with
``train.steps=0`` calibrates on ``calib_batches`` training batches first. ``time_batches``: batches
the MoE evaluator times the expert execution on.
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Section


@dataclasses.dataclass(frozen=True)
class PlanKeys:
    capacity: int = 0
    group: int = 1
    tiers: bool = True
    residency: bool = False
    tier_multipliers: tuple = (0.5, 1.0, 2.0, 4.0)
    hot_fraction: float = 0.5
    plan: str = ""
    calib_batches: int = 8
    time_batches: int = 2


def needs_calibration(c) -> bool:
    """Whether the MoE execution needs calibrated expert loads (npumoe, or uniform at capacity 0)."""
    return c.model.moe_experts > 0 and (c.moe.strategy == "npumoe" or (c.moe.strategy == "uniform"
                                                                       and not c.moe.capacity))


def _validate(c) -> None:
    x = c.moe
    if not c.model.moe_experts:
        return
    if x.chunk <= 0 or x.group <= 0 or x.capacity < 0 or x.calib_batches <= 0 or x.time_batches < 0:
        raise ConfigError("moe.chunk, moe.group and moe.calib_batches must be positive, moe.capacity and "
                          "moe.time_batches >= 0")
    if not 0 < x.hot_fraction <= 1 or not x.tier_multipliers or min(x.tier_multipliers) <= 0:
        raise ConfigError(f"moe.hot_fraction={x.hot_fraction} must lie in (0, 1] and moe.tier_multipliers="
                          f"{tuple(x.tier_multipliers)} must be positive numbers")
    if needs_calibration(c) and not x.plan and c.train.steps:
        raise ConfigError(f"moe.strategy={x.strategy!r} needs calibrated expert loads before training: set "
                          "moe.plan=<calibration.json> (edge-jax moe calibrate), or evaluate a trained run with "
                          "train.steps=0 init_from=<workdir>, which calibrates first")


SECTIONS.register("npumoe", Section("moe", PlanKeys, _validate, resumable=("moe.calib_batches", "moe.time_batches"),
                                    order=200))
