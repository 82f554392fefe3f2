"""Classic demand-fetch policies for both tiers: FIFO, LRU and LFU (priority = higher keeps).

Each ranks the residents of a tier when it must make room; none prefetches. Recency and counts are
per expert and shared by both tiers (an access touches the expert wherever it lives); FIFO's order is
per tier (the step an expert last entered that tier). LFU counts every access since the start (a
"perfect" LFU that remembers evicted experts) and breaks ties by recency.
"""
from __future__ import annotations

import numpy as np

from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, CachePolicy, Policy


class FIFO(Policy):
    name = "fifo"

    def reset(self, sim, n_steps: int) -> None:
        n = sim.profile.n_layers * sim.profile.n_experts
        self.entered = {"vram": np.full(n, -1.0), "ram": np.full(n, -1.0)}

    def admitted(self, tier: str, objs: np.ndarray, t: int) -> None:
        self.entered[tier][objs] = t

    def priority(self, tier: str) -> np.ndarray:
        return self.entered[tier]


class LRU(Policy):
    name = "lru"

    def reset(self, sim, n_steps: int) -> None:
        self.last = np.full(sim.profile.n_layers * sim.profile.n_experts, -1.0)

    def observe(self, t: int, token: int, layer: int, objs: np.ndarray) -> None:
        self.last[objs] = t

    def priority(self, tier: str) -> np.ndarray:
        return self.last


class LFU(Policy):
    name = "lfu"

    def reset(self, sim, n_steps: int) -> None:
        n = sim.profile.n_layers * sim.profile.n_experts
        self.count = np.zeros(n)
        self.last = np.full(n, -1.0)
        self.t = 0

    def observe(self, t: int, token: int, layer: int, objs: np.ndarray) -> None:
        self.count[objs] += 1
        self.last[objs] = t
        self.t = t

    def priority(self, tier: str) -> np.ndarray:
        return self.count + (self.last + 1) / (self.t + 2)   # recency in [0, 1) breaks count ties


for _policy in (FIFO, LRU, LFU):
    CACHE_POLICIES.register(_policy.name, CachePolicy(make=lambda c, scout, cls=_policy: cls()))
