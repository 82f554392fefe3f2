"""Static execution plans for a MoE layer (NPUMoE §4.1-§4.3).

A :class:`LayerPlan` fixes every shape a layer's expert execution needs, per prefill chunk:

- ``capacity[e]``: the rows expert ``e`` gets in the zero-padded buffer (0 for fallback experts);
- ``groups``: static groups of same-capacity experts, each run as one dense call on a
  ``[X, Z, D]`` buffer (X experts of capacity Z; NPUMoE §4.2);
- ``fallback``: cold experts run on the exact ragged path, with no capacity and no padding (§4.3).

The copies routed to a static expert beyond its capacity (its overflow) are dropped, or with
``MoEExec.overflow="fallback"`` run on the exact path beside the fallback experts.

Plans are built from numbers only: :func:`uniform_plan` gives every expert one capacity (the
Fig. 17 "base" and the Table 5 grid), :func:`tiered_plan` follows the calibrated load of each expert
(static tiers, grouping by tier and popularity, hot/cold residency). :mod:`edge_jax.papers.npumoe.calibrate`
measures the loads.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from edge_jax.layers.moe.strategies import MOE_STRATEGIES, OVERFLOW_POLICIES


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    capacity: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    fallback: tuple[int, ...] = ()

    def __post_init__(self):
        placed = sorted([e for g in self.groups for e in g] + list(self.fallback))
        if placed != list(range(len(self.capacity))):
            raise ValueError(f"a layer plan must place each of its {len(self.capacity)} experts exactly once "
                             f"(groups {self.groups}, fallback {self.fallback})")
        for g in self.groups:
            if len({self.capacity[e] for e in g}) != 1 or self.capacity[g[0]] <= 0:
                raise ValueError(f"experts of one group need one positive capacity; group {g} has "
                                 f"{[self.capacity[e] for e in g]}")
        if any(self.capacity[e] for e in self.fallback):
            raise ValueError("fallback experts have no capacity (they run exactly); set their capacity to 0")

    @property
    def n_experts(self) -> int:
        return len(self.capacity)

    @property
    def buffer_rows(self) -> int:
        """Rows of the padded buffer per chunk (all static groups together)."""
        return sum(self.capacity)

    @property
    def calls(self) -> int:
        """Expert calls dispatched per chunk: one per static group, one for the fallback experts."""
        return len(self.groups) + (1 if self.fallback else 0)

    def exact_experts(self, exact_overflow: bool = False) -> tuple[int, ...]:
        """Experts whose copies may take the exact fallback path: the fallback experts and, when the
        overflow runs exactly, every expert (any static one can overflow)."""
        return tuple(range(self.n_experts)) if exact_overflow else self.fallback

    def expert_calls(self, exact_overflow: bool = False) -> int:
        """:attr:`calls`, counting the exact path's call when only the overflow needs it."""
        return len(self.groups) + (1 if self.exact_experts(exact_overflow) else 0)

    def order(self) -> tuple[int, ...]:
        """Static experts in buffer order: group after group."""
        return tuple(e for g in self.groups for e in g)

    def offsets(self) -> np.ndarray:
        """First buffer row of each expert (fallback experts: the buffer's end)."""
        off = np.full(self.n_experts, self.buffer_rows, np.int32)
        row = 0
        for e in self.order():
            off[e], row = row, row + self.capacity[e]
        return off


@dataclasses.dataclass(frozen=True)
class MoEExec:
    """How the MoE layers execute: the strategy, the prefill chunk (tokens that share one set of
    capacities), which overflow leaves the buffer first (``drop``), one plan per MoE layer for
    ``uniform`` / ``npumoe``, and what happens to the overflow (``overflow``: dropped or run exactly)."""
    strategy: str = "dropless"
    chunk: int = 512
    drop: str = "saliency"
    plans: tuple[LayerPlan, ...] = ()
    overflow: str = "drop"

    @property
    def capacity_bound(self) -> bool:
        return MOE_STRATEGIES.get(self.strategy).capacity_bound

    @property
    def exact_overflow(self) -> bool:
        """Whether the overflow runs on the exact fallback path instead of being dropped."""
        return OVERFLOW_POLICIES.get(self.overflow).exact


def base_capacity(chunk: int, top_k: int, n_experts: int) -> int:
    """NPUMoE §4.1: the mean per-expert load of a chunk under balanced routing, ``chunk * k / E``."""
    return max(1, math.ceil(chunk * top_k / n_experts))


def imbalance_ratio(load_E) -> float:
    """``max load / mean load`` (1 = balanced)."""
    load = np.asarray(load_E, np.float64)
    return float(load.max() / load.mean()) if load.sum() > 0 else 1.0


def busiest_capacity(load_E, chunk: int, top_k: int) -> int:
    """NPUMoE §4.1: the busiest expert's expected rows per chunk, ``I * base`` (I = imbalance ratio)."""
    return math.ceil(imbalance_ratio(load_E) * base_capacity(chunk, top_k, len(load_E)))


def _groups(experts, size: int) -> list[tuple[int, ...]]:
    return [tuple(experts[i:i + size]) for i in range(0, len(experts), size)]


def uniform_plan(n_experts: int, capacity: int, group: int) -> LayerPlan:
    """One capacity for every expert, in groups of ``group`` experts (1: one call per expert)."""
    if capacity <= 0 or group <= 0:
        raise ValueError(f"uniform plan needs a positive capacity and group size, got {capacity}, {group}")
    return LayerPlan((capacity,) * n_experts, tuple(_groups(list(range(n_experts)), group)))


def tiered_plan(load_E, chunk: int, top_k: int, multipliers=(0.5, 1.0, 2.0, 4.0), group: int = 1,
                hot_fraction: float = 1.0, tiers: bool = True) -> LayerPlan:
    """NPUMoE §4.1-4.3 from calibrated loads (token counts per expert).

    Static tiers: the tier capacities are ``ceil(m * base)`` for the multipliers ``m``; each expert
    takes the smallest tier at or above its expected rows per chunk (``share * chunk * k``), the
    largest tier if none is. ``tiers=False`` gives every expert the busiest estimate ``I * base``.
    Residency: the ``ceil(hot_fraction * E)`` most popular experts are hot; the rest run on the
    fallback path. Grouping: hot experts of one tier, in popularity order, in groups of ``group``.
    """
    load = np.asarray(load_E, np.float64)
    n = len(load)
    share = load / load.sum() if load.sum() > 0 else np.full(n, 1.0 / n)
    rank = [int(e) for e in np.argsort(-load, kind="stable")]
    if tiers:
        levels = sorted({math.ceil(m * base_capacity(chunk, top_k, n)) for m in multipliers})
        expected = share * chunk * top_k
        cap = [next((c for c in levels if c >= expected[e]), levels[-1]) for e in range(n)]
    else:
        cap = [busiest_capacity(load, chunk, top_k)] * n
    hot = rank[:max(1, math.ceil(hot_fraction * n))]
    fallback = tuple(sorted(set(range(n)) - set(hot)))
    groups = []
    for c in sorted({cap[e] for e in hot}, reverse=True):
        groups += _groups([e for e in hot if cap[e] == c], group)
    capacity = tuple(0 if e in fallback else int(cap[e]) for e in range(n))
    return LayerPlan(capacity, tuple(groups), fallback)
