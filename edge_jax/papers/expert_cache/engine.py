"""The two-tier expert-cache simulator (§3): VRAM (G) and RAM (R) over an unbounded NVMe store.

Objects are layer-local experts, flattened as o = layer * E + expert, with byte sizes S (a
:class:`~edge_jax.papers.expert_cache.profile.DeviceProfile`). Time steps run layer by layer, token by token
(ℓ(t) = t mod L): step t executes layer ℓ(t) of token t // L and needs that token's top-k experts
A_t. Each step, in order:

1. **stall**: every a ∈ A_t costs (1 - x^G_a) C^G_a + (1 - x^R_a) C^R_a with the residency just before
   the step (t^-): 0 from VRAM, C^G from RAM, C^R + C^G from NVMe (§3.3);
2. the policy **observes** A_t (recency, counts, EWMA);
3. **demand fetch**: A_t is made resident, NVMe -> RAM, then RAM -> VRAM, so the step can run. Room is
   made by evicting the policy's lowest-priority residents, never a member of A_t. RAM evicts experts
   that are not in VRAM first; evicting one that is also removes it from VRAM (containment
   x^G <= x^R holds at every step);
4. **prefetch** (policies that prefetch): while the layer computes, the idle links may move experts
   ahead of need: each step banks ``credit_g`` / ``credit_r`` bytes of link time (bandwidth x compute
   time); the bank holds at most one step's credit or one largest expert, whichever is more (idle time
   is not hoarded), and a prefetch spends its expert's size from the bank.

Bytes moved into each tier (L_G, L_R of §3.4) count demand fetches and prefetches. Stall counts only
accesses, as in §3.3; prefetching is charged in link time (the bank) instead. With ``check=True``
every step asserts containment, capacities, residency of A_t (before prefetching, which may evict it
once its step has run) and the byte books.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from edge_jax.papers.expert_cache.profile import DeviceProfile
from edge_jax.registry import Registry


@dataclasses.dataclass
class SimStats:
    tokens: int = 0
    accesses: int = 0
    hits_g: int = 0          # served from VRAM
    hits_r: int = 0          # not in VRAM, served from RAM
    misses: int = 0          # fetched from NVMe
    stall_s: float = 0.0
    bytes_g: float = 0.0     # bytes moved into VRAM (L_G summed), prefetches included
    bytes_r: float = 0.0     # bytes moved into RAM (L_R summed), prefetches included
    prefetch_bytes_g: float = 0.0
    prefetch_bytes_r: float = 0.0
    wall_s: float = 0.0

    def metrics(self) -> dict:
        acc = max(self.accesses, 1)
        return {
            "stall_ms_per_token": 1e3 * self.stall_s / max(self.tokens, 1),
            "stall_s": self.stall_s,
            "vram_hit_pct": 100.0 * self.hits_g / acc,
            "ram_hit_pct": 100.0 * self.hits_r / max(self.accesses - self.hits_g, 1),
            "nvme_pct": 100.0 * self.misses / acc,
            "gb_to_vram": self.bytes_g / 1e9,
            "gb_to_ram": self.bytes_r / 1e9,
            "prefetch_gb_vram": self.prefetch_bytes_g / 1e9,
            "prefetch_gb_ram": self.prefetch_bytes_r / 1e9,
            "tokens": self.tokens,
            "accesses": self.accesses,
            "sim_s": self.wall_s,
            "accesses_per_s": self.accesses / max(self.wall_s, 1e-9),
        }


@dataclasses.dataclass(frozen=True)
class CachePolicy:
    """A ``cache.policy``: ``make(config, scout)`` builds its online :class:`Policy`; an offline bound
    instead has ``offline(experts, profile, cap_g, cap_r) -> (SimStats, extra metrics)``; neither:
    nothing is simulated. ``scout(config)``: whether it reads ScoutGate's predictions."""
    make: Callable | None = None
    offline: Callable | None = None
    scout: Callable = lambda c: False


CACHE_POLICIES: Registry[CachePolicy] = Registry("cache policy", key="cache.policy")


def simulated_policies() -> list[str]:
    """The policies that simulate a cache (online or as an offline bound), in registration order."""
    return [name for name, p in CACHE_POLICIES.items() if p.make is not None or p.offline is not None]


class Policy:
    """Residency policy interface. ``priority`` ranks residents (higher = keep); the engine asks for it
    only when a tier must make room. Policies that prefetch set ``prefetches`` and implement
    ``prefetch(sim)``, calling :meth:`Simulator.promote` / :meth:`Simulator.stage`."""
    name = "policy"
    prefetches = False

    def reset(self, sim: "Simulator", n_steps: int) -> None:
        pass

    def observe(self, t: int, token: int, layer: int, objs: np.ndarray) -> None:
        pass

    def admitted(self, tier: str, objs: np.ndarray, t: int) -> None:
        pass

    def priority(self, tier: str) -> np.ndarray:
        raise NotImplementedError

    def prefetch(self, sim: "Simulator") -> None:
        pass


def object_ids(experts_NLJ: np.ndarray, n_experts: int) -> np.ndarray:
    """int64 [N, L, J] flattened object ids layer * E + expert."""
    n_layers = experts_NLJ.shape[1]
    return np.arange(n_layers, dtype=np.int64)[None, :, None] * n_experts + experts_NLJ.astype(np.int64)


class Simulator:
    """One run of a policy over a trace span with byte capacities ``cap_g`` (VRAM) and ``cap_r`` (RAM)."""

    def __init__(self, profile: DeviceProfile, cap_g: float, cap_r: float, check: bool = False):
        self.profile, self.cap_g, self.cap_r, self.check = profile, float(cap_g), float(cap_r), check
        self.sizes = profile.sizes
        self.unit = float(profile.sizes[0]) if profile.uniform else 0.0   # the one expert size, if there is one
        largest = float(profile.sizes.max())
        self.bank_cap_g = max(largest, profile.credit_g)
        self.bank_cap_r = max(largest, profile.credit_r)

    # -- state -------------------------------------------------------------------------------------
    def _reset(self) -> None:
        n = self.profile.n_layers * self.profile.n_experts
        self.in_g = np.zeros(n, bool)
        self.in_r = np.zeros(n, bool)
        self.occ_g = self.occ_r = 0.0
        self.bank_g = self.bank_r = 0.0
        self.stats = SimStats()
        self.t = 0

    def run(self, experts_NLJ: np.ndarray, policy: Policy) -> SimStats:
        """Replay ``experts_NLJ`` (top-k expert ids per token and layer) under ``policy``."""
        self._reset()
        objs_NLJ = object_ids(experts_NLJ, self.profile.n_experts)
        n_tokens, n_layers, k = objs_NLJ.shape
        self.policy = policy
        policy.reset(self, n_tokens * n_layers)
        st, in_g, in_r = self.stats, self.in_g, self.in_r
        cost_g, cost_r = self.profile.cost_g, self.profile.cost_r
        prefetches = policy.prefetches and (self.profile.credit_g > 0 or self.profile.credit_r > 0)
        t0 = time.perf_counter()
        t = 0
        for token in range(n_tokens):
            for layer in range(n_layers):
                objs = objs_NLJ[token, layer]
                self.t = t
                ig = in_g[objs]
                if ig.all():
                    st.hits_g += k
                    policy.observe(t, token, layer, objs)
                else:
                    ir = in_r[objs]
                    miss_g, miss_r = objs[~ig], objs[~ir]
                    st.stall_s += float(cost_g[miss_g].sum() + cost_r[miss_r].sum())
                    st.hits_g += k - len(miss_g)
                    st.misses += len(miss_r)
                    st.hits_r += len(miss_g) - len(miss_r)
                    policy.observe(t, token, layer, objs)
                    if len(miss_r):
                        self._admit("ram", miss_r, objs)
                    self._admit("vram", miss_g, objs)
                if self.check:
                    self.check_invariants(objs)
                if prefetches:
                    self.bank_g = min(self.bank_g + self.profile.credit_g, self.bank_cap_g)
                    self.bank_r = min(self.bank_r + self.profile.credit_r, self.bank_cap_r)
                    policy.prefetch(self)
                    if self.check:
                        self.check_invariants()
                t += 1
        st.tokens, st.accesses = n_tokens, n_tokens * n_layers * k
        st.wall_s = time.perf_counter() - t0
        return st

    # -- demand fetch ------------------------------------------------------------------------------
    def _admit(self, tier: str, new: np.ndarray, required: np.ndarray) -> None:
        """Make ``new`` resident in ``tier``, evicting the lowest-priority residents outside ``required``."""
        in_t, cap, occ = (self.in_g, self.cap_g, self.occ_g) if tier == "vram" else (self.in_r, self.cap_r, self.occ_r)
        need = float(self.sizes[new].sum())
        if need > cap - occ:
            cand_mask = in_t.copy()
            cand_mask[required] = False
            if self.unit:     # one expert size: evict the m lowest one by one (same order as _evict_lowest)
                pr = self.policy.priority(tier)
                for _ in range(int(np.ceil((need - (cap - occ)) / self.unit))):
                    pool = cand_mask & ~self.in_g if tier == "ram" else cand_mask
                    victim = int(np.where(pool if pool.any() else cand_mask, pr, np.inf).argmin())
                    cand_mask[victim] = False
                    self._evict(tier, np.array([victim]))
            else:
                self._evict_lowest(tier, cand_mask, need - (cap - occ))
        in_t[new] = True
        if tier == "vram":
            self.occ_g += need
            self.stats.bytes_g += need
        else:
            self.occ_r += need
            self.stats.bytes_r += need
        self.policy.admitted(tier, new, self.t)

    def _evict_lowest(self, tier: str, cand_mask: np.ndarray, deficit: float) -> None:
        """Evict the lowest-priority candidates (RAM: those outside VRAM first) until ``deficit`` bytes are free."""
        cand = np.flatnonzero(cand_mask)
        pr = self.policy.priority(tier)[cand]
        order = np.lexsort((pr, self.in_g[cand])) if tier == "ram" else np.argsort(pr, kind="stable")
        freed = np.cumsum(self.sizes[cand[order]])
        m = int(np.searchsorted(freed, deficit)) + 1
        if m > len(cand):
            raise AssertionError(f"{tier}: cannot make room for {deficit:.0f} more bytes (capacity check missed)")
        self._evict(tier, cand[order[:m]])

    def _evict(self, tier: str, victims: np.ndarray) -> None:
        if tier == "ram":
            back = victims[self.in_g[victims]]     # containment: leaving RAM means leaving VRAM
            if len(back):
                self.in_g[back] = False
                self.occ_g -= float(self.sizes[back].sum())
            self.in_r[victims] = False
            self.occ_r -= float(self.sizes[victims].sum())
        else:
            self.in_g[victims] = False
            self.occ_g -= float(self.sizes[victims].sum())

    # -- prefetch (called from Policy.prefetch) ----------------------------------------------------
    def promote(self, o: int, victims: np.ndarray) -> bool:
        """Prefetch RAM -> VRAM, demoting ``victims`` (VRAM residents) if that makes room. False (nothing
        changes) when ``o`` is not in RAM only, the bank lacks its bytes, or it would not fit."""
        if not self.in_r[o] or self.in_g[o]:
            return False
        return self._prefetch("vram", o, victims[self.in_g[victims]])

    def stage(self, o: int, victims: np.ndarray) -> bool:
        """Prefetch NVMe -> RAM, evicting ``victims`` (RAM residents not in VRAM) if that makes room."""
        if self.in_r[o]:
            return False
        return self._prefetch("ram", o, victims[self.in_r[victims] & ~self.in_g[victims]])

    def _prefetch(self, tier: str, o: int, victims: np.ndarray) -> bool:
        g = tier == "vram"
        s, bank = float(self.sizes[o]), self.bank_g if g else self.bank_r
        free = (self.cap_g - self.occ_g) if g else (self.cap_r - self.occ_r)
        if s > bank or s > free + float(self.sizes[victims].sum()):
            return False
        if s > free:
            self._evict(tier, victims[:int(np.searchsorted(np.cumsum(self.sizes[victims]), s - free)) + 1])
        if g:
            self.in_g[o] = True
            self.occ_g += s
            self.bank_g -= s
            self.stats.bytes_g += s
            self.stats.prefetch_bytes_g += s
        else:
            self.in_r[o] = True
            self.occ_r += s
            self.bank_r -= s
            self.stats.bytes_r += s
            self.stats.prefetch_bytes_r += s
        self.policy.admitted(tier, np.array([o]), self.t)
        return True

    # -- invariants --------------------------------------------------------------------------------
    def check_invariants(self, required: np.ndarray | None = None) -> None:
        """After the demand fetch (``required`` = A_t, which must be in VRAM) and again after prefetching,
        which may evict A_t once its step has run."""
        tol = 1e-6 * max(self.cap_r, 1.0)
        assert not np.any(self.in_g & ~self.in_r), "containment violated: an expert in VRAM is not in RAM"
        assert required is None or self.in_g[required].all(), "a required expert is not in VRAM for its step"
        occ_g, occ_r = float(self.sizes[self.in_g].sum()), float(self.sizes[self.in_r].sum())
        assert abs(occ_g - self.occ_g) <= tol and abs(occ_r - self.occ_r) <= tol, "byte books disagree"
        assert occ_g <= self.cap_g + tol, f"VRAM over capacity: {occ_g} > {self.cap_g}"
        assert occ_r <= self.cap_r + tol, f"RAM over capacity: {occ_r} > {self.cap_r}"
        assert -tol <= self.bank_g <= self.bank_cap_g + tol and -tol <= self.bank_r <= self.bank_cap_r + tol
