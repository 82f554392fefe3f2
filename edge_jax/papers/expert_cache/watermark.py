"""The fused watermark policy (§4): EWMA + ScoutGate probabilities, reuse-distance weights, and per-tier
Lagrangian watermarks with hysteresis, density-ordered promotion and staging.

Every step t (layer ℓ(t) of token i), after the step's experts A_t are served:

* EWMA on the layer-local clock (§4.1): only layer ℓ(t) updates,
  p^EWMA_{e,ℓ} <- (1 - α) p^EWMA_{e,ℓ} + α 1{(e, ℓ) ∈ A_t}; it starts at ``p0``.
* Fusion: p^base = (1 - η) p^EWMA + η p^SG, with ScoutGate's probabilities for the token of the next
  step (the next token is known once the last layer has run; tokens never come from the future).
* Reuse distance to the next step's layer ℓ' = ℓ(t+1): D(ℓ | ℓ') = (ℓ - ℓ') mod L, W = exp(-γ D), so
  the next layer weighs 1 and the layer just run weighs least; p^fuse = p^base W.
* Benefit density per tier: b^G = p^fuse C^G / S and b^R = p^fuse C^R / S (cost saved per byte).
* Watermarks (§4.3), projected subgradient on byte occupancy:
  λ <- [λ + step · b̄ · (bytes wanted - K) / K]_+ for each tier, where the wanted bytes are those of the
  experts the rule would hold (residents with b >= λ(1 - h), others with b >= λ(1 + h)) and b̄, the
  density of an average expert at probability k/E, makes ``step`` unit-free.
* Keep / evict with hysteresis h: a resident is kept while b >= λ(1 - h); a non-resident is admitted
  ahead of need only when b >= λ(1 + h). When a tier must make room, it evicts the lowest density
  first (so experts below their keep threshold go first).
* Prefetch while the layer computes (the engine's link bank): the densest RAM-resident expert not in
  VRAM with b^G >= λ_G(1 + h) is promoted RAM -> VRAM, and the densest NVMe expert with b^R >= λ_R(1 + h)
  is staged NVMe -> RAM, each only into free bytes or bytes of residents below their keep threshold
  (lowest density first; staging never evicts a VRAM expert), as often as the bank allows.

η = 0 is the EWMA-only policy and η = 1 the ScoutGate-only one.
"""
from __future__ import annotations

import numpy as np

from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, CachePolicy, Policy


def ewma_update(p: np.ndarray, hits, alpha: float) -> None:
    """In place, on the layer-local clock: p <- (1 - alpha) p + alpha 1{hit} (``hits`` indexes ``p``)."""
    p *= 1.0 - alpha
    p[hits] += alpha


class Watermark(Policy):
    prefetches = True

    def __init__(self, name: str = "watermark", *, eta: float = 0.5, gamma: float = 0.5, alpha: float = 0.02,
                 p0: float = -1.0, step: float = 0.05, hysteresis: float = 0.1, scout: np.ndarray | None = None):
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"predictor.eta must be in [0, 1], got {eta}")
        if eta > 0 and scout is None:
            raise ValueError("eta > 0 needs ScoutGate probabilities (train ScoutGate, or use eta=0: EWMA only)")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"predictor.alpha must be in (0, 1], got {alpha}")
        if gamma < 0 or step < 0 or not 0.0 <= hysteresis < 1.0:
            raise ValueError(f"need gamma >= 0, watermark_step >= 0 and hysteresis in [0, 1); got gamma={gamma}, "
                             f"step={step}, hysteresis={hysteresis}")
        self.name, self.eta, self.gamma, self.alpha, self.p0 = name, eta, gamma, alpha, p0
        self.step, self.h, self.scout = step, hysteresis, scout

    def reset(self, sim, n_steps: int) -> None:
        prof = sim.profile
        L, E = prof.n_layers, prof.n_experts
        self.sim, self.L, self.E = sim, L, E
        self.k = None
        self.ewma = np.full((L, E), self.p0 if self.p0 >= 0 else 0.0)
        dist = (np.arange(L)[None, :] - np.arange(L)[:, None]) % L          # [ℓ', ℓ]
        self.weight = np.exp(-self.gamma * dist)
        self.dens_g, self.dens_r = prof.cost_g / prof.sizes, prof.cost_r / prof.sizes
        self.lam = {"vram": 0.0, "ram": 0.0}
        self.cap = {"vram": sim.cap_g, "ram": sim.cap_r}
        self.b = {"vram": self.dens_g * 0.0, "ram": self.dens_r * 0.0}
        self.n_tokens = n_steps // L

    def observe(self, t: int, token: int, layer: int, objs: np.ndarray) -> None:
        if self.k is None:            # first step: the prior p0 defaults to k / E, and b̄ follows from k
            self.k = len(objs)
            if self.p0 < 0:
                self.ewma[:] = self.k / self.E
            self.bbar = {"vram": float(self.dens_g.mean()) * self.k / self.E,
                         "ram": float(self.dens_r.mean()) * self.k / self.E}
        ewma_update(self.ewma[layer], objs - layer * self.E, self.alpha)
        nxt_layer = (layer + 1) % self.L
        nxt_token = min(token + (nxt_layer == 0), self.n_tokens - 1)
        p = self.ewma if self.eta == 0 else (1 - self.eta) * self.ewma + self.eta * self.scout[nxt_token]
        p_fuse = (p * self.weight[nxt_layer][:, None]).reshape(-1)
        sim = self.sim
        for tier, dens, resident in (("vram", self.dens_g, sim.in_g), ("ram", self.dens_r, sim.in_r)):
            b = p_fuse * dens
            self.b[tier] = b
            lam = self.lam[tier]
            wanted = np.where(resident, b >= lam * (1 - self.h), b >= lam * (1 + self.h))
            over = (float(wanted.dot(sim.sizes)) - self.cap[tier]) / self.cap[tier]
            self.lam[tier] = max(0.0, lam + self.step * self.bbar[tier] * over)

    def priority(self, tier: str) -> np.ndarray:
        return self.b[tier]

    def prefetch(self, sim) -> None:
        s_min = float(sim.sizes.min())
        while sim.bank_g >= s_min and self._prefetch("vram", sim.in_r & ~sim.in_g, sim.in_g, sim.promote):
            pass
        while sim.bank_r >= s_min and self._prefetch("ram", ~sim.in_r, sim.in_r & ~sim.in_g, sim.stage):
            pass

    def _prefetch(self, tier: str, candidates: np.ndarray, residents: np.ndarray, move) -> bool:
        """Move the densest admissible candidate into ``tier``; whether it moved."""
        b, lam = self.b[tier], self.lam[tier]
        cand = np.flatnonzero(candidates & (b >= lam * (1 + self.h)))
        if not len(cand):
            return False
        best = int(cand[np.argmax(b[cand])])
        below = np.flatnonzero(residents & (b < lam * (1 - self.h)))
        return move(best, below[np.argsort(b[below], kind="stable")])


def _watermark(eta: float | None):
    """The controller driven by EWMA alone (eta 0), ScoutGate alone (1), or fused (None: predictor.eta)."""
    def make(c, scout):
        p = c.predictor
        e = p.eta if eta is None else eta
        return Watermark(c.cache.policy, eta=e, gamma=p.gamma, alpha=p.alpha, p0=p.p0, step=p.watermark_step,
                         hysteresis=p.hysteresis, scout=scout if e > 0 else None)
    return make


CACHE_POLICIES.register("ewma", CachePolicy(make=_watermark(0.0)))
CACHE_POLICIES.register("scoutgate", CachePolicy(make=_watermark(1.0), scout=lambda c: True))
CACHE_POLICIES.register("watermark", CachePolicy(make=_watermark(None), scout=lambda c: c.predictor.eta > 0))
