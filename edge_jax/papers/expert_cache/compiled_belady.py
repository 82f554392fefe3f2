"""Numba twins of :func:`~edge_jax.papers.expert_cache.belady.next_use` and
:func:`~edge_jax.papers.expert_cache.belady.min_misses`: the same answers (the tests compare them on random
traces), in one pass each instead of a sort and an argmax over every object per eviction's numpy call."""
from __future__ import annotations

import numpy as np
from numba import njit

from edge_jax.papers.expert_cache.compiled_tiers import pairwise_sum


@njit(cache=True, error_model="numpy")
def next_use(objs_TJ):
    """int64 [T, J]: the next step > t that needs the same object, or T if none (a backward scan; an
    object appears at most once per step)."""
    n_steps, k = objs_TJ.shape
    seen = np.full(objs_TJ.max() + 1 if objs_TJ.size else 1, n_steps, np.int64)
    nxt = np.empty((n_steps, k), np.int64)
    for t in range(n_steps - 1, -1, -1):
        for j in range(k):
            o = objs_TJ[t, j]
            nxt[t, j] = seen[o]
        for j in range(k):
            seen[objs_TJ[t, j]] = t
    return nxt


@njit(cache=True, error_model="numpy")
def min_misses(objs_TJ, nxt_TJ, sizes, cap):
    """bool [T, J]: which accesses miss a single tier of ``cap`` bytes run by MIN (evict the resident whose
    key next use x n + id is largest, never one the step needs)."""
    n_steps, k = objs_TJ.shape
    n_obj = sizes.shape[0]
    resident = np.zeros(n_obj, np.bool_)
    needed = np.zeros(n_obj, np.bool_)
    key = np.full(n_obj, -1, np.int64)
    occ = 0.0
    miss = np.zeros((n_steps, k), np.bool_)
    new = np.empty(k, np.float64)
    for t in range(n_steps):
        nm = 0
        for j in range(k):
            o = objs_TJ[t, j]
            key[o] = nxt_TJ[t, j] * n_obj + o
            if not resident[o]:
                miss[t, j] = True
                new[nm] = sizes[o]
                nm += 1
        if nm == 0:
            continue
        need = pairwise_sum(new, 0, nm)
        for j in range(k):
            needed[objs_TJ[t, j]] = True
        while need > cap - occ:
            victim, top = 0, -1
            for o in range(n_obj):
                if resident[o] and not needed[o] and key[o] > top:
                    victim, top = o, key[o]
            if top < 0:
                raise AssertionError("MIN cannot make room (capacity below one step's experts)")
            resident[victim] = False
            occ -= sizes[victim]
        for j in range(k):
            o = objs_TJ[t, j]
            needed[o] = False
            resident[o] = True
        occ += need
    return miss
