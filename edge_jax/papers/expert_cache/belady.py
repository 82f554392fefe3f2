"""Belady's offline optimum for the two-tier cache, as a lower bound on demand-fetch stall.

Per tier, MIN: when room is needed, evict the resident expert whose next use is farthest in the future
(ties: the larger object id), never a member of the current step's A_t. VRAM runs MIN with K_G,
RAM with K_R, each on the full access sequence, and

    stall_Belady = Σ_{VRAM misses} C^G + Σ_{RAM misses} C^R.

**What the bound is.** Under containment every access that misses RAM also misses VRAM, so any policy's
stall is Σ_{its VRAM misses} C^G + Σ_{its RAM misses} C^R. When all experts have one size (so C^G and
C^R are each one number), MIN minimises the miss count of each tier on its own, so no demand-fetch
policy can have fewer misses in either tier: the sum is a lower bound. It is also achieved: MIN is a
stack algorithm (Mattson et al., 1970), so the VRAM contents under K_G stay inside the RAM contents
under K_R (K_G <= K_R) and the two runs form one feasible two-tier schedule. It bounds policies that
fetch on demand only; a policy that prefetches in otherwise idle link time (the watermark policy with
``compute_ms`` > 0) is not bound by it. With heterogeneous sizes, MIN by next use is a heuristic (the
weighted problem is NP-hard), so ``exact`` is False and the number is not a bound.
"""
from __future__ import annotations

import time

import numpy as np

from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, CachePolicy, SimStats, object_ids
from edge_jax.papers.expert_cache.profile import DeviceProfile


def next_use(objs_TJ: np.ndarray) -> np.ndarray:
    """int64 [T, J]: the next step > t that needs the same object, or T if none."""
    n_steps, k = objs_TJ.shape
    flat = objs_TJ.reshape(-1)
    step = np.repeat(np.arange(n_steps, dtype=np.int64), k)
    order = np.lexsort((step, flat))
    nxt = np.full(flat.shape, n_steps, np.int64)
    same = flat[order[1:]] == flat[order[:-1]]
    nxt[order[:-1][same]] = step[order[1:]][same]
    return nxt.reshape(n_steps, k)


def min_misses(objs_TJ: np.ndarray, nxt_TJ: np.ndarray, sizes: np.ndarray, cap: float) -> np.ndarray:
    """bool [T, J]: which accesses miss a single tier of ``cap`` bytes run by MIN."""
    n_steps, k = objs_TJ.shape
    n_obj = len(sizes)
    resident = np.zeros(n_obj, bool)
    key = np.full(n_obj, -1, np.int64)            # next use * n_obj + id; larger = evict first
    occ = 0.0
    miss = np.zeros((n_steps, k), bool)
    for t in range(n_steps):
        objs = objs_TJ[t]
        hit = resident[objs]
        key[objs] = nxt_TJ[t] * n_obj + objs
        if hit.all():
            continue
        miss[t] = ~hit
        new = objs[~hit]
        need = float(sizes[new].sum())
        while need > cap - occ:
            masked = np.where(resident, key, -1)
            masked[objs] = -1
            victim = int(masked.argmax())
            if masked[victim] < 0:
                raise AssertionError("MIN cannot make room (capacity below one step's experts)")
            resident[victim] = False
            occ -= float(sizes[victim])
        resident[new] = True
        occ += need
    return miss


def belady(experts_NLJ: np.ndarray, profile: DeviceProfile, cap_g: float, cap_r: float,
           compiled: bool = True) -> tuple[SimStats, dict]:
    """Stats of the two-tier Belady bound, and ``{"exact": bool, "containment_violations": int}``.
    ``compiled``: next use and MIN by the numba twins (edge_jax.papers.expert_cache.compiled_belady, the same
    answers); False runs the numpy functions above."""
    t0 = time.perf_counter()
    objs_NLJ = object_ids(experts_NLJ, profile.n_experts)
    n_tokens, n_layers, k = objs_NLJ.shape
    objs = np.ascontiguousarray(objs_NLJ.reshape(n_tokens * n_layers, k))
    find_next, run_min = next_use, min_misses
    if compiled:
        from edge_jax.papers.expert_cache.compiled_belady import min_misses as run_min
        from edge_jax.papers.expert_cache.compiled_belady import next_use as find_next
    nxt = find_next(objs)
    sizes = np.ascontiguousarray(profile.sizes, np.float64)
    miss_g = run_min(objs, nxt, sizes, float(cap_g))
    miss_r = run_min(objs, nxt, sizes, float(cap_r))
    st = SimStats(tokens=n_tokens, accesses=objs.size)
    st.hits_g = int((~miss_g).sum())
    st.misses = int(miss_r.sum())
    st.hits_r = int((miss_g & ~miss_r).sum())
    st.stall_s = float(profile.cost_g[objs[miss_g]].sum() + profile.cost_r[objs[miss_r]].sum())
    st.bytes_g = float(profile.sizes[objs[miss_g]].sum())
    st.bytes_r = float(profile.sizes[objs[miss_r]].sum())
    st.wall_s = time.perf_counter() - t0
    return st, {"exact": profile.uniform and cap_g <= cap_r,
                "containment_violations": int((miss_r & ~miss_g).sum())}


def _offline(experts_NLJ, profile, cap_g, cap_r):
    stats, bound = belady(experts_NLJ, profile, cap_g, cap_r)
    return stats, {"belady_exact": bound["exact"], "belady_containment_violations": bound["containment_violations"]}


CACHE_POLICIES.register("belady", CachePolicy(offline=_offline))
