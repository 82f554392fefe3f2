"""Numba twins of the two tiers' bookkeeping in :class:`~edge_jax.papers.expert_cache.engine.Simulator`.

State is arrays: ``res`` bool [2, n] (row ``VRAM`` = x^G, row ``RAM`` = x^R) with each tier's residents also
listed (``members[tier, :cnt[tier]]``, in no order; ``pos`` is each resident's place in it), so evictions
scan a tier's residents rather than every expert; ``occ`` / ``bank`` / ``caps`` float64 [2] and ``flt``
float64 [5] (stall, bytes into VRAM, into RAM, prefetched into VRAM, into RAM). Every
float is computed as the reference computes it, in the same order: a numpy ``.sum()`` becomes
:func:`pairwise_sum`, numpy's own summation order, so the compiled simulator's stall and byte counts are
bit-for-bit the reference's (tests/papers/expert_cache/test_cache_compiled.py).
"""
from __future__ import annotations

import numpy as np
from numba import njit

VRAM, RAM = 0, 1
STALL, BYTES, PREFETCHED = 0, 1, 3     # flt[STALL], flt[BYTES + tier], flt[PREFETCHED + tier]


@njit(cache=True, error_model="numpy", inline="always")
def pairwise_sum(a, lo, n):
    """sum(a[lo:lo + n]) in numpy's order for float64 up to 128 terms (its pairwise sum: 8 running sums),
    so it equals ``a[lo:lo + n].sum()`` exactly. Longer sums run in order: only byte sums of whole-byte
    sizes get that long here (``compiled_sim.has_kernel``), and those are exact in any order. (numpy halves
    longer arrays recursively; a recursive numba function breaks numba's on-disk cache.)"""
    if n < 8 or n > 128:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i, end = 8, n - n % 8
    while i < end:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, error_model="numpy", inline="always")
def sum_at(values, idx, n, buf):
    """``values[idx[:n]].sum()`` as numpy computes it (``buf``: scratch of at least n floats)."""
    for j in range(n):
        buf[j] = values[idx[j]]
    return pairwise_sum(buf, 0, n)


@njit(cache=True, error_model="numpy", inline="always")
def enter(tier, o, res, members, pos, cnt):
    """``o`` (not resident in ``tier``) becomes resident."""
    res[tier, o] = True
    pos[tier, o] = cnt[tier]
    members[tier, cnt[tier]] = o
    cnt[tier] += 1


@njit(cache=True, error_model="numpy", inline="always")
def leave(tier, o, res, members, pos, cnt):
    """``o`` (resident in ``tier``) leaves it."""
    res[tier, o] = False
    last, at = members[tier, cnt[tier] - 1], pos[tier, o]
    members[tier, at] = last
    pos[tier, last] = at
    cnt[tier] -= 1


@njit(cache=True, error_model="numpy", inline="always")
def evict(tier, victims, m, res, members, pos, cnt, occ, sizes, buf):
    """``Simulator._evict`` of ``victims[:m]``: leaving RAM also leaves VRAM (containment)."""
    if tier == RAM:
        nb = 0
        for j in range(m):
            if res[VRAM, victims[j]]:
                buf[nb] = sizes[victims[j]]
                nb += 1
                leave(VRAM, victims[j], res, members, pos, cnt)
        if nb:
            occ[VRAM] -= pairwise_sum(buf, 0, nb)
    for j in range(m):
        leave(tier, victims[j], res, members, pos, cnt)
    occ[tier] -= sum_at(sizes, victims, m, buf)


@njit(cache=True, error_model="numpy", inline="always")
def evict_one(tier, o, res, members, pos, cnt, occ, sizes):
    """``evict`` of the single expert ``o`` (a one-term sum is the term itself)."""
    if tier == RAM and res[VRAM, o]:
        leave(VRAM, o, res, members, pos, cnt)
        occ[VRAM] -= sizes[o]
    leave(tier, o, res, members, pos, cnt)
    occ[tier] -= sizes[o]


@njit(cache=True, error_model="numpy", inline="always")
def evict_one_by_one(tier, count, pol, row, stamp, t, res, members, pos, cnt, occ, sizes):
    """One expert size: evict ``count`` residents of lowest priority ``pol[row]`` one at a time, never one
    of step ``t``'s experts (``stamp[o] == t``), the lowest id on ties (as numpy's argmin over ids); RAM
    takes residents outside VRAM while there are any. The scan is branch-free (selects, not branches):
    which resident wins is unpredictable, and mispredicted branches were its largest cost."""
    n_big = res.shape[1]
    for _ in range(count):
        pool = False
        if tier == RAM:
            for idx in range(cnt[RAM]):
                i = members[RAM, idx]
                if stamp[i] != t and not res[VRAM, i]:
                    pool = True
                    break
        victim, low = n_big, np.inf
        for idx in range(cnt[tier]):
            i = members[tier, idx]
            v = pol[row, i]
            better = (stamp[i] != t) & (not (pool and res[VRAM, i])) & ((v < low) | ((v == low) & (i < victim)))
            victim = i if better else victim
            low = v if better else low
        if victim < n_big:      # always, given the capacity check
            evict_one(tier, victim, res, members, pos, cnt, occ, sizes)


@njit(cache=True, error_model="numpy", inline="always")
def rank(ids, n, pol, row, res, outside_vram_first):
    """Sort ``ids[:n]`` in place by (VRAM residency if ``outside_vram_first``, priority ``pol[row]``, id):
    the order of numpy's stable sorts over ascending ids. Insertion sort: no allocation in the step loop."""
    for a in range(1, n):
        x = ids[a]
        gx, kx = outside_vram_first and res[VRAM, x], pol[row, x]
        b = a - 1
        while b >= 0:
            y = ids[b]
            gy, ky = outside_vram_first and res[VRAM, y], pol[row, y]
            if gy > gx or (gy == gx and (ky > kx or (ky == kx and y > x))):
                ids[b + 1] = y
                b -= 1
            else:
                break
        ids[b + 1] = x


@njit(cache=True, error_model="numpy", inline="always")
def prefix_for(ids, n, sizes, deficit):
    """How many of ``ids[:n]`` free ``deficit`` bytes in order: numpy's searchsorted(cumsum, deficit) + 1."""
    freed = 0.0
    for j in range(n):
        freed += sizes[ids[j]]
        if freed >= deficit:
            return j + 1
    return n


@njit(cache=True, error_model="numpy", inline="always")
def evict_lowest(tier, deficit, pol, row, stamp, t, res, members, pos, cnt, occ, sizes, buf, ids):
    """Mixed sizes: evict the lowest-priority residents outside step ``t`` (RAM: those outside VRAM first,
    then by priority, then by id, as ``np.lexsort`` over ids) until ``deficit`` bytes are free."""
    nc = 0
    for idx in range(cnt[tier]):
        o = members[tier, idx]
        if stamp[o] != t:
            ids[nc] = o
            nc += 1
    rank(ids, nc, pol, row, res, tier == RAM)
    evict(tier, ids, prefix_for(ids, nc, sizes, deficit), res, members, pos, cnt, occ, sizes, buf)


@njit(cache=True, error_model="numpy", inline="always")
def prefetch_move(tier, o, victims, nv, res, members, pos, cnt, occ, bank, caps, sizes, flt, buf):
    """``Simulator._prefetch``: move ``o`` into ``tier`` from the link bank, evicting a prefix of the
    ranked ``victims[:nv]`` if that makes room; False (nothing changes) if it cannot."""
    s = sizes[o]
    free = caps[tier] - occ[tier]
    if s > bank[tier] or s > free + sum_at(sizes, victims, nv, buf):
        return False
    if s > free:
        evict(tier, victims, prefix_for(victims, nv, sizes, s - free), res, members, pos, cnt, occ, sizes, buf)
    enter(tier, o, res, members, pos, cnt)
    occ[tier] += s
    bank[tier] -= s
    flt[BYTES + tier] += s
    flt[PREFETCHED + tier] += s
    return True
