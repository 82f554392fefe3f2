"""Registries of how a MoE layer executes (``moe.strategy``), which overflow it drops first
(``moe.drop``) and what happens to that overflow (``moe.overflow``); the variants register in
:mod:`edge_jax.layers.moe.execute`.

- ``dropless``: every token copy through its experts, one dense pass per expert (exact).
- ``ragged``: the copies sorted by expert and run as a ragged batch (exact).
- ``uniform`` / ``npumoe``: static per-expert capacities from a per-layer
  :class:`~edge_jax.layers.moe.plan.LayerPlan` (one capacity for all, or NPUMoE's calibrated
  tiers, groups and residency). The token copies routed to a static expert beyond its capacity
  (overflow) are ranked by the ``moe.drop`` policy (lowest score first out of the buffer), then
  ``moe.overflow``: ``drop`` discards them (NPUMoE §3.2, §4.1), ``fallback`` runs them exactly on the
  fallback path of the cold experts, so nothing is dropped.

A new strategy is one :class:`Strategy` and one registration.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from edge_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class Strategy:
    """``capacity_bound``: runs under the layer's static plan (``execute.capacity_moe``);
    otherwise ``run(x_ND, ids_NJ, w_NJ, experts) -> y_ND`` runs it."""
    capacity_bound: bool
    run: Callable | None = None


MOE_STRATEGIES: Registry[Strategy] = Registry("MoE strategy", key="moe.strategy")
# Overflow score per token of a prefill chunk (higher is kept): fn(saliency_N, chunk) -> score_N.
DROP_POLICIES: Registry[Callable] = Registry("MoE drop policy", key="moe.drop")


@dataclasses.dataclass(frozen=True)
class Overflow:
    """What happens to the overflow copies of the static experts: ``exact`` False drops them, True runs
    them on the exact fallback path (the ragged call in the model, the host CPU in the runtime)."""
    exact: bool


OVERFLOW_POLICIES: Registry[Overflow] = Registry("MoE overflow policy", key="moe.overflow")
