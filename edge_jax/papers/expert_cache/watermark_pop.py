"""``watermark_pop``: the fused watermark policy (§4) with a RAM tier ranked by long-run popularity.

A variant beside the paper's policy (``watermark`` stays as specified). Everything the watermark policy
does is kept: the EWMA, the fusion with ScoutGate, the benefit densities b^G, b^R, the watermarks λ_G, λ_R
and their updates, hysteresis, the VRAM ranking and both prefetch rules (promotion RAM -> VRAM and staging
NVMe -> RAM by b^G, b^R against the watermarks). Two things differ:

* the reuse-distance decay is its own key, ``predictor.pop_gamma`` (default 0: no decay), instead of
  ``predictor.gamma``;
* RAM makes room by a score with a long memory instead of b^R. Each step t (layer ℓ of token i), in
  ``observe`` and before the watermark's own update, a second EWMA on the layer-local clock with rate
  ``predictor.pop_alpha`` (α_pop, default 0.001, i.e. a memory of about a thousand tokens against the
  watermark EWMA's fifty) updates layer ℓ only:

      pop_{e,ℓ} <- (1 - α_pop) pop_{e,ℓ} + α_pop 1{(e, ℓ) ∈ A_t},

  starting, like the watermark EWMA, at ``predictor.p0`` (negative: k / E, set at the first step). Then
  the watermark's update runs (so b^R holds this step's p^fuse C^R / S) and the RAM score is

      r_{e,ℓ} = pop_{e,ℓ} C^R_{e,ℓ} / S_{e,ℓ} + μ b^R_{e,ℓ} = (pop_{e,ℓ} + μ p^fuse_{e,ℓ}) C^R / S,

  with μ = ``predictor.pop_mix`` (default 0.3). ``priority("ram")`` returns r and ``priority("vram")``
  returns b^G, so a demand fetch into RAM evicts the lowest r among residents outside VRAM first (the
  engine's rule), ties to the lower object id (``argmin``); VRAM evicts the lowest b^G as the watermark
  policy does.

Why: RAM holds most experts (60% of all bytes in the grids), so what it misses are the rarely used
ones, and which of those come back is a matter of long-run frequency; b^R follows the next step's
probabilities, which move every step and make RAM churn. On the real traces the RAM ranking and the
zero decay each cut stall by a few percent (docs/expert_cache.md). Per-step work is plain arithmetic over
the L·E objects (two extra vector updates), as in the watermark policy.
"""
from __future__ import annotations

import numpy as np

from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, CachePolicy
from edge_jax.papers.expert_cache.watermark import Watermark, ewma_update


class WatermarkPop(Watermark):
    def __init__(self, name: str = "watermark_pop", *, pop_alpha: float = 0.001, pop_mix: float = 0.3,
                 gamma: float = 0.0, **kw):
        if not 0.0 < pop_alpha <= 1.0:
            raise ValueError(f"predictor.pop_alpha must be in (0, 1], got {pop_alpha}")
        if pop_mix < 0:
            raise ValueError(f"predictor.pop_mix must be >= 0, got {pop_mix}")
        super().__init__(name, gamma=gamma, **kw)
        self.pop_alpha, self.pop_mix = pop_alpha, pop_mix

    def reset(self, sim, n_steps: int) -> None:
        super().reset(sim, n_steps)
        self.pop = np.full((self.L, self.E), self.p0 if self.p0 >= 0 else 0.0)
        self.rank_r = np.zeros(self.L * self.E)

    def observe(self, t: int, token: int, layer: int, objs: np.ndarray) -> None:
        if self.k is None and self.p0 < 0:      # the prior k / E, as the watermark EWMA's
            self.pop[:] = len(objs) / self.E
        ewma_update(self.pop[layer], objs - layer * self.E, self.pop_alpha)
        super().observe(t, token, layer, objs)
        self.rank_r = self.pop.reshape(-1) * self.dens_r + self.pop_mix * self.b["ram"]

    def priority(self, tier: str) -> np.ndarray:
        return self.rank_r if tier == "ram" else self.b["vram"]


def _make(c, scout):
    p = c.predictor
    return WatermarkPop(c.cache.policy, pop_alpha=p.pop_alpha, pop_mix=p.pop_mix, gamma=p.pop_gamma, eta=p.eta,
                        alpha=p.alpha, p0=p.p0, step=p.watermark_step, hysteresis=p.hysteresis,
                        scout=scout if p.eta > 0 else None)


CACHE_POLICIES.register("watermark_pop", CachePolicy(make=_make, scout=lambda c: c.predictor.eta > 0))
