"""The compiled expert-cache simulator: :class:`~edge_jax.papers.expert_cache.engine.Simulator` and the
FIFO, LRU, LFU, watermark (EWMA, ScoutGate, fused) and watermark_pop policies as one numba loop.

:func:`simulate` is what runs use. It replays the same steps as the reference (engine.py with policies.py
/ watermark.py / watermark_pop.py, kept beside it as the specification): stall, observe, demand fetch,
prefetch, with the same tie-breaking (lowest id first) and every float computed in the reference's order,
so its stall, hit counts, bytes and final watermarks are identical to the reference's, not merely close.
Policies without a kernel here (a new one, or a subclass of these) and profiles whose expert sizes are not
whole bytes (the reference's byte sums use BLAS, whose order is not numpy's) run on the reference instead.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

from edge_jax.papers.expert_cache.compiled_tiers import (
    RAM,
    STALL,
    VRAM,
    enter,
    evict_lowest,
    evict_one_by_one,
    prefetch_move,
    rank,
    sum_at,
)
from edge_jax.papers.expert_cache.engine import SimStats, Simulator, object_ids
from edge_jax.papers.expert_cache.policies import FIFO, LFU, LRU
from edge_jax.papers.expert_cache.watermark import Watermark
from edge_jax.papers.expert_cache.watermark_pop import WatermarkPop

KINDS = {FIFO: 0, LRU: 1, LFU: 2, Watermark: 3, WatermarkPop: 4}
_FIFO, _LRU, _LFU, _WM, _POP = 0, 1, 2, 3, 4
# rows of the policy state ``pol`` [8, n]: FIFO entered[tier] = pol[tier]; watermark b[tier] = pol[4 + tier];
# watermark_pop's RAM ranking = pol[6]; LFU's priorities = pol[7]
_ENTERED, _LAST, _COUNT, _DENSITY, _RANK_R, _SCRATCH = 0, 2, 3, 4, 6, 7


@njit(cache=True, error_model="numpy", inline="always")
def _priority(kind, tier, pol, t):
    """The row of ``pol`` that ranks ``tier``'s residents now (LFU's is computed into its scratch row)."""
    if kind == _FIFO:
        return _ENTERED + tier
    if kind == _LRU:
        return _LAST
    if kind == _LFU:
        for i in range(pol.shape[1]):
            pol[_SCRATCH, i] = pol[_COUNT, i] + (pol[_LAST, i] + 1.0) / (t + 2)
        return _SCRATCH
    if kind == _POP and tier == RAM:
        return _RANK_R
    return _DENSITY + tier


@njit(cache=True, error_model="numpy", inline="always")
def _admit(kind, tier, new, nn, stamp, t, res, members, pos, cnt, occ, caps, sizes, unit, pol, flt, buf, ids):
    """``Simulator._admit``: make ``new[:nn]`` resident in ``tier`` for step ``t``, never evicting one of
    its experts (``stamp[o] == t``)."""
    need = sum_at(sizes, new, nn, buf)
    room = caps[tier] - occ[tier]
    if need > room:
        row = _priority(kind, tier, pol, t)
        if unit != 0.0:
            evict_one_by_one(tier, int(np.ceil((need - room) / unit)), pol, row, stamp, t, res, members, pos, cnt,
                             occ, sizes)
        else:
            evict_lowest(tier, need - room, pol, row, stamp, t, res, members, pos, cnt, occ, sizes, buf, ids)
    for j in range(nn):
        enter(tier, new[j], res, members, pos, cnt)
    occ[tier] += need
    flt[1 + tier] += need
    if kind == _FIFO:
        for j in range(nn):
            pol[_ENTERED + tier, new[j]] = t


@njit(cache=True, error_model="numpy", inline="always")
def _layer_ewma(objs_TJ, t, layer, n_experts, p, alpha):
    """``ewma_update`` of this layer's row of the flat [L*E] ``p``: p <- (1 - alpha) p, p[hits] += alpha
    (the watermark's EWMA, and watermark_pop's slow popularity EWMA before it)."""
    row = np.uint64(layer * n_experts)     # an unsigned index: no negative-index wraparound, so this vectorises
    for e in range(n_experts):
        p[row + np.uint64(e)] *= 1.0 - alpha
    for j in range(objs_TJ.shape[1]):
        p[objs_TJ[t, j]] += alpha


@njit(cache=True, error_model="numpy", inline="always")
def _observe_watermark(objs_TJ, t, token, layer, n_layers, n_experts, n_tokens, res, whole, caps, pol, ewma, lam,
                       wm, weight, dens_g, dens_r, scout, eta_s):
    """``Watermark.observe``: EWMA of this layer, fused probabilities for the next step, densities, watermarks.
    The bytes the rule wants are summed in integers (``whole``: sizes in whole bytes), which is exact, as the
    reference's float sum of whole numbers is."""
    eta, alpha, step, h, bbar_g, bbar_r = wm[0], wm[1], wm[2], wm[3], wm[4], wm[5]
    _layer_ewma(objs_TJ, t, layer, n_experts, ewma, alpha)
    nl = (layer + 1) % n_layers
    nt = min(token + (1 if nl == 0 else 0), n_tokens - 1)
    keep_g, admit_g = lam[VRAM] * (1 - h), lam[VRAM] * (1 + h)
    keep_r, admit_r = lam[RAM] * (1 - h), lam[RAM] * (1 + h)
    want_g = want_r = 0
    for i in range(weight.shape[1]):
        if eta == 0.0:
            p = ewma[i] * weight[nl, i]
        else:
            p = ((1.0 - eta) * ewma[i] + np.float64(eta_s * scout[nt, i])) * weight[nl, i]
        bg, br = p * dens_g[i], p * dens_r[i]
        pol[_DENSITY + VRAM, i] = bg
        pol[_DENSITY + RAM, i] = br
        want_g += whole[i] if bg >= (keep_g if res[VRAM, i] else admit_g) else 0
        want_r += whole[i] if br >= (keep_r if res[RAM, i] else admit_r) else 0
    lam_g = lam[VRAM] + step * bbar_g * ((np.float64(want_g) - caps[VRAM]) / caps[VRAM])
    lam_r = lam[RAM] + step * bbar_r * ((np.float64(want_r) - caps[RAM]) / caps[RAM])
    lam[VRAM] = lam_g if lam_g > 0.0 else 0.0
    lam[RAM] = lam_r if lam_r > 0.0 else 0.0


@njit(cache=True, error_model="numpy", inline="always")
def _prefetch_watermark(tier, h, lam, pol, res, members, pos, cnt, occ, bank, caps, sizes, flt, buf, below):
    """``Watermark._prefetch``: promote (VRAM) or stage (RAM) the densest admissible expert (lowest id on
    ties); whether it moved."""
    row = _DENSITY + tier
    admit, keep = lam[tier] * (1 + h), lam[tier] * (1 - h)
    best, top = -1, -np.inf     # branch-free scans (selects)
    if tier == VRAM:        # RAM residents outside VRAM
        for idx in range(cnt[RAM]):
            i = members[RAM, idx]
            v = pol[row, i]
            better = (not res[VRAM, i]) & (v >= admit) & ((best < 0) | (v > top) | ((v == top) & (i < best)))
            best = i if better else best
            top = v if better else top
    else:                   # experts outside RAM
        for i in range(sizes.shape[0]):
            v = pol[row, i]
            better = (not res[RAM, i]) & (v >= admit) & ((best < 0) | (v > top))
            best = i if better else best
            top = v if better else top
    if best < 0:
        return False
    nb, below_bytes = 0, 0.0
    for idx in range(cnt[tier]):
        i = members[tier, idx]
        if (tier == VRAM or not res[VRAM, i]) and pol[row, i] < keep:
            below[nb] = i
            nb += 1
            below_bytes += sizes[i]     # whole bytes: exact in any order
    s, free = sizes[best], caps[tier] - occ[tier]
    if s > bank[tier] or s > free + below_bytes:
        return False
    if s > free:            # by density, then id (numpy's stable argsort over ascending ids)
        rank(below, nb, pol, row, res, False)
    return prefetch_move(tier, best, below, nb, res, members, pos, cnt, occ, bank, caps, sizes, flt, buf)


@njit(cache=True, error_model="numpy", _nrt=False)
def _run(kind, objs_TJ, n_layers, n_experts, sizes, cost_g, cost_r, caps, unit, credit, bank_cap, prefetches,
         ewma, wm, weight, dens_g, dens_r, scout, eta_s, pop, lam, counts, flt, state):
    """The step loop. Compiled without numba's reference counting (``_nrt=False``: it allocates nothing;
    :func:`_state` does), which would otherwise be the largest cost: two atomic updates per array per
    inlined helper call, every step."""
    res, members, pos, cnt, stamp, occ, bank, pol, buf, miss_g, miss_r, below, whole, s_min = state
    n_steps, k = objs_TJ.shape
    n = sizes.shape[0]
    n_tokens = n_steps // n_layers
    token, layer = 0, -1
    for t in range(n_steps):
        layer += 1
        if layer == n_layers:
            token, layer = token + 1, 0
        ng = nr = 0
        for j in range(k):
            o = objs_TJ[t, j]
            stamp[o] = t
            if not res[VRAM, o]:
                miss_g[ng] = o
                ng += 1
            if not res[RAM, o]:
                miss_r[nr] = o
                nr += 1
        if ng:
            flt[STALL] += sum_at(cost_g, miss_g, ng, buf) + sum_at(cost_r, miss_r, nr, buf)
        counts[0] += k - ng
        counts[1] += ng - nr
        counts[2] += nr
        if kind == _LRU or kind == _LFU:
            for j in range(k):
                if kind == _LFU:
                    pol[_COUNT, objs_TJ[t, j]] += 1
                pol[_LAST, objs_TJ[t, j]] = t
        elif kind == _WM or kind == _POP:
            if kind == _POP:
                _layer_ewma(objs_TJ, t, layer, n_experts, pop, wm[6])
            _observe_watermark(objs_TJ, t, token, layer, n_layers, n_experts, n_tokens, res, whole, caps, pol, ewma,
                               lam, wm, weight, dens_g, dens_r, scout, eta_s)
            if kind == _POP:
                for i in range(n):
                    pol[_RANK_R, i] = pop[i] * dens_r[i] + wm[7] * pol[_DENSITY + RAM, i]
        if nr:
            _admit(kind, RAM, miss_r, nr, stamp, t, res, members, pos, cnt, occ, caps, sizes, unit, pol, flt, buf,
                   below)
        if ng:
            _admit(kind, VRAM, miss_g, ng, stamp, t, res, members, pos, cnt, occ, caps, sizes, unit, pol, flt, buf,
                   below)
        if prefetches:
            for tier in (VRAM, RAM):
                bank[tier] = min(bank[tier] + credit[tier], bank_cap[tier])
            for tier in (VRAM, RAM):
                while bank[tier] >= s_min and _prefetch_watermark(tier, wm[3], lam, pol, res, members, pos, cnt, occ,
                                                                  bank, caps, sizes, flt, buf, below):
                    pass


@njit(cache=True, error_model="numpy")
def ewma_history(experts_NLJ, state, alpha, out):
    """``experiment.ewma_probs``'s loop: ``out[i]`` = each layer's EWMA (float32) just before token i, then the
    update p <- (1 - alpha) p, p[hits] += alpha; ``state`` [L, E] float64 starts at the prior."""
    n_tokens, n_layers, k = experts_NLJ.shape
    for i in range(n_tokens):
        for li in range(n_layers):
            for e in range(state.shape[1]):
                out[i, li, e] = np.float32(state[li, e])
                state[li, e] *= 1.0 - alpha
            for j in range(k):
                state[li, experts_NLJ[i, li, j]] += alpha


def _state(sizes, k):
    """The simulator's working arrays, zeroed: residency ``res`` and its lists (``members``, ``pos``, ``cnt``),
    ``stamp`` (stamp[o] == t: o is one of step t's experts), ``occ``, ``bank``, the policy rows ``pol``
    (last use and entry times -1, counts and densities 0), scratch, ``whole`` (sizes in whole bytes: the
    watermark's byte sums in integers) and the smallest size."""
    n = sizes.shape[0]
    pol = np.full((8, n), -1.0)
    pol[_COUNT] = 0.0
    pol[_DENSITY:] = 0.0
    return (np.zeros((2, n), np.bool_), np.zeros((2, n), np.int64), np.zeros((2, n), np.int64), np.zeros(2, np.int64),
            np.full(n, -1, np.int64), np.zeros(2), np.zeros(2), pol, np.empty(max(n, k)), np.empty(k, np.int64),
            np.empty(k, np.int64), np.empty(n, np.int64), sizes.astype(np.int64), float(sizes.min()))


def has_kernel(policy, profile) -> bool:
    """Whether :func:`simulate` runs ``policy`` compiled (else it runs the reference)."""
    sizes = profile.sizes
    return type(policy) in KINDS and bool(np.all(sizes == np.round(sizes))) and float(sizes.sum()) < 2.0 ** 53


def simulate(experts_NLJ: np.ndarray, profile, cap_g: float, cap_r: float, policy) -> SimStats:
    """Replay ``experts_NLJ`` under ``policy``: compiled where :func:`has_kernel`, else the reference
    :class:`Simulator`. A watermark policy's final ``lam`` is left on it, as the reference leaves it."""
    if not has_kernel(policy, profile):
        return Simulator(profile, cap_g, cap_r).run(experts_NLJ, policy)
    objs_NLJ = object_ids(experts_NLJ, profile.n_experts)
    n_tokens, n_layers, k = objs_NLJ.shape
    L, E = profile.n_layers, profile.n_experts
    kind = KINDS[type(policy)]
    sizes = np.ascontiguousarray(profile.sizes, np.float64)
    largest = float(sizes.max())
    credit = np.array([profile.credit_g, profile.credit_r], np.float64)
    bank_cap = np.array([max(largest, profile.credit_g), max(largest, profile.credit_r)], np.float64)
    ewma, wm, weight, pop = np.zeros(1), np.zeros(8), np.zeros((1, 1)), np.zeros(1)
    dens_g = dens_r = np.zeros(1)
    scout, eta_s = np.zeros((1, 1), np.float32), np.float32(0.0)
    if kind in (_WM, _POP):     # Watermark.reset and its first observe, computed by the same numpy expressions
        p = policy
        ewma = np.full(L * E, p.p0 if p.p0 >= 0 else k / E)
        pop = ewma.copy()
        weight = np.repeat(np.exp(-p.gamma * ((np.arange(L)[None, :] - np.arange(L)[:, None]) % L)), E, axis=1)
        dens_g, dens_r = profile.cost_g / profile.sizes, profile.cost_r / profile.sizes
        wm = np.array([p.eta, p.alpha, p.step, p.h, float(dens_g.mean()) * k / E, float(dens_r.mean()) * k / E,
                       getattr(p, "pop_alpha", 0.0), getattr(p, "pop_mix", 0.0)])
        if p.eta != 0:     # one row per token; eta in the scout's dtype, as numpy takes the reference's eta * scout[t]
            scout = np.ascontiguousarray(p.scout).reshape(len(p.scout), L * E)
            eta_s = scout.dtype.type(p.eta)
    prefetches = bool(getattr(policy, "prefetches", False)) and (profile.credit_g > 0 or profile.credit_r > 0)
    lam, counts, flt = np.zeros(2), np.zeros(3, np.int64), np.zeros(5)
    unit = float(sizes[0]) if profile.uniform else 0.0
    state = _state(sizes, k)
    t0 = time.perf_counter()
    _run(kind, np.ascontiguousarray(objs_NLJ.reshape(n_tokens * n_layers, k)), n_layers, E, sizes,
         np.ascontiguousarray(profile.cost_g, np.float64), np.ascontiguousarray(profile.cost_r, np.float64),
         np.array([float(cap_g), float(cap_r)]), unit, credit, bank_cap, prefetches, ewma, wm, weight, dens_g, dens_r,
         scout, eta_s, pop, lam, counts, flt, state)
    wall = time.perf_counter() - t0
    if kind in (_WM, _POP):
        policy.lam = {"vram": float(lam[VRAM]), "ram": float(lam[RAM])}
    return SimStats(tokens=n_tokens, accesses=n_tokens * n_layers * k, hits_g=int(counts[0]), hits_r=int(counts[1]),
                    misses=int(counts[2]), stall_s=float(flt[STALL]), bytes_g=float(flt[1]), bytes_r=float(flt[2]),
                    prefetch_bytes_g=float(flt[3]), prefetch_bytes_r=float(flt[4]), wall_s=wall)
