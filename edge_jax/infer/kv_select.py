"""KV-cache slot selection for the eviction baselines: SnapKV, PyramidKV budgets and StreamingLLM.

After a full prefill every attention layer holds S prompt slots per KV head group g (GQA: G key/value
heads, each shared by H/G query heads). These functions choose which slots to keep under a budget.
They are pure and traceable: call them inside a jitted step, or jit them with the int/str arguments
static (``jax.jit(snapkv_indices, static_argnames=("budget", "window", "kernel", "kind"))``). Shapes
are static; a row that has fewer real slots than the budget gets padding entries, which point at
slot 0 and are marked False in the returned validity mask (``keep_valid_BGP`` / ``valid_BP``).

* SnapKV (Li et al., 2024): the attention of the last ``window`` prompt queries (the observation
  window), summed over those queries and the query heads of a group, votes for the earlier slots;
  the votes are pooled along S (max or avg, odd kernel) and the top ``budget - window`` earlier slots
  are kept together with the window itself (:func:`snapkv_indices`).
* PyramidKV (Cai et al., 2024): the same selection with per-layer budgets falling linearly with
  depth (:func:`pyramid_budgets`).
* StreamingLLM (Xiao et al., 2023): the first ``sink`` and the last ``recent`` slots
  (:func:`streaming_indices`).

:func:`gather_kv` and :func:`gather_per_group` apply the returned indices to [B, S, G, K] caches and
[B, G, S] per-slot arrays (e.g. positions). ``*_reference`` functions are the same selections
written as NumPy loops (sorting candidate lists), for the tests.
"""
from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

POOL_KINDS = ("max", "avg")


def _check_pool(kernel: int, kind: str) -> None:
    if not isinstance(kernel, int) or kernel <= 0 or kernel % 2 == 0:
        raise ValueError(f"pooling kernel must be a positive odd int (got {kernel!r}); use e.g. kernel=7")
    if kind not in POOL_KINDS:
        raise ValueError(f"unknown pooling kind {kind!r}; use kind='max' or kind='avg'")


def _shifted(x, kernel: int, fill):
    """The ``kernel`` views x[..., s - r + i] (i = 0..kernel-1, r = kernel // 2) padded with ``fill``."""
    r = kernel // 2
    S = x.shape[-1]
    xp = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(r, r)], constant_values=fill)
    return [jax.lax.slice_in_dim(xp, i, i + S, axis=-1) for i in range(kernel)]


def pool_votes(votes_BGS, kernel: int, kind: str = "max", mask=None):
    """1-D pooling of ``votes_BGS`` along its last axis (S): odd ``kernel``, stride 1, 'same' length.

    Slot s pools the entries s - kernel//2 .. s + kernel//2 that exist and, when ``mask`` (bool,
    broadcastable to the votes) is given, are in the mask. The edges are padded so that padding
    never counts: max-pooling pads with -inf (ignored by the max) and avg-pooling averages only over
    the real entries (sum of the real entries / their count, not / kernel). Masked-out entries are
    treated exactly like padding, and the output there is 0.

    ``kind`` is "max" or "avg". Returns the votes' dtype (avg accumulates in float32); kernel 1
    returns the input unchanged (zeroed outside ``mask``). Any leading dims are allowed.
    """
    _check_pool(kernel, kind)
    if mask is not None:
        mask = jnp.broadcast_to(mask, votes_BGS.shape)
    if kernel == 1:
        return votes_BGS if mask is None else jnp.where(mask, votes_BGS, jnp.zeros((), votes_BGS.dtype))
    if kind == "max":
        x = votes_BGS if mask is None else jnp.where(mask, votes_BGS, -jnp.inf).astype(votes_BGS.dtype)
        out = jnp.stack(_shifted(x, kernel, -jnp.inf)).max(axis=0)
    else:
        m = jnp.ones(votes_BGS.shape, jnp.float32) if mask is None else mask.astype(jnp.float32)
        x = votes_BGS.astype(jnp.float32) * m
        total = sum(_shifted(x, kernel, 0.0))
        count = sum(_shifted(m, kernel, 0.0))
        out = total / jnp.maximum(count, 1.0)
    out = out.astype(votes_BGS.dtype)
    return out if mask is None else jnp.where(mask, out, jnp.zeros((), out.dtype))


def _pool_reference(v_S, kernel: int, kind: str, mask_S) -> np.ndarray:
    """One row pooled in float64 (see :func:`pool_votes_reference`)."""
    S, r = len(v_S), kernel // 2
    out = np.zeros(S)
    for s in range(S):
        if mask_S[s]:
            vals = [float(v_S[t]) for t in range(s - r, s + r + 1) if 0 <= t < S and mask_S[t]]
            out[s] = max(vals) if kind == "max" else sum(vals) / len(vals)
    return out


def pool_votes_reference(votes_BGS, kernel: int, kind: str = "max", mask=None):
    """:func:`pool_votes` slot by slot in float64: each masked-in slot pools the masked-in entries of
    its window that exist (max, or their mean); 0 elsewhere. Returns the votes' dtype."""
    _check_pool(kernel, kind)
    v = np.asarray(jnp.asarray(votes_BGS, jnp.float32), np.float64)
    m = np.ones(v.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), v.shape)
    out = np.zeros(v.shape)
    for lead in np.ndindex(v.shape[:-1]):
        out[lead] = _pool_reference(v[lead], kernel, kind, m[lead])
    return jnp.asarray(out, jnp.asarray(votes_BGS).dtype)


def last_valid_mask(valid_BS, window: int):
    """True at the last ``window`` True slots of each row of ``valid_BS`` (all of them if fewer)."""
    from_end_BS = jnp.cumsum(valid_BS[:, ::-1].astype(jnp.int32), axis=-1)[:, ::-1]
    return valid_BS & (from_end_BS <= window)


def snapkv_indices(votes_BGS, valid_BS, budget: int, window: int, kernel: int = 7, kind: str = "max"):
    """SnapKV's kept slots: the observation window plus the top ``budget - window`` pooled-vote slots.

    ``votes_BGS``: float (float32 or bfloat16) attention probabilities from the last ``window``
    prompt queries to every slot, summed over those queries and the query heads of group g.
    ``valid_BS``: bool, the real prompt slots (normally a prefix 0..n_b-1; None = all S slots).

    Per (b, g): the last ``window`` valid slots are always kept; the earlier valid slots (the
    candidates) are pooled with :func:`pool_votes` (``kernel``, ``kind``; neighbours outside the
    candidates count as padding), in float32, and the top ``budget - window`` by pooled vote are kept,
    ties broken by the lower slot index. Invalid slots are never kept.

    Returns ``(idx_BGP, keep_valid_BGP)`` with P = ``budget``: int32 slot indices, the real ones
    sorted ascending and unique, first; ``keep_valid_BGP`` (bool) marks them. A row with
    n_b <= budget valid slots keeps all of them; its remaining budget - n_b entries point at slot 0
    and are False. ValueError if budget <= 0 or window is not in 0..budget.
    """
    if not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"SnapKV budget must be a positive int (got {budget!r}); pass budget >= 1")
    if not isinstance(window, int) or not 0 <= window <= budget:
        raise ValueError(f"SnapKV window must be in 0..budget={budget} (got {window!r}); lower window or raise budget")
    _check_pool(kernel, kind)
    B, G, S = votes_BGS.shape
    if valid_BS is None:
        valid_BS = jnp.ones((B, S), bool)
    valid_BS = valid_BS.astype(bool)
    votes = votes_BGS.astype(jnp.float32)
    Sp = max(S, budget)  # pad so that every top_k below asks for at most Sp entries
    if Sp > S:
        votes = jnp.pad(votes, [(0, 0), (0, 0), (0, Sp - S)])
        valid_BS = jnp.pad(valid_BS, [(0, 0), (0, Sp - S)])
    slots = jnp.arange(Sp, dtype=jnp.int32)
    parts_idx, parts_ok = [], []
    win_BS = last_valid_mask(valid_BS, window)
    if window > 0:
        last_BW = jax.lax.top_k(jnp.where(valid_BS, slots, -1), window)[0]  # largest valid indices
        parts_idx.append(jnp.broadcast_to(last_BW[:, None], (B, G, window)))
        parts_ok.append(jnp.broadcast_to(last_BW[:, None] >= 0, (B, G, window)))
    k = budget - window
    if k > 0:
        cand_B1S = (valid_BS & ~win_BS)[:, None, :]
        pooled = pool_votes(votes, kernel, kind, mask=cand_B1S)
        score_BGS = jnp.where(cand_B1S, pooled, -jnp.inf)
        val_BGk, idx_BGk = jax.lax.top_k(score_BGS, k)  # equal scores: lower index first
        parts_idx.append(idx_BGk.astype(jnp.int32))
        parts_ok.append(val_BGk > -jnp.inf)
    idx_BGP = jnp.concatenate(parts_idx, axis=-1)
    ok_BGP = jnp.concatenate(parts_ok, axis=-1)
    key_BGP = jnp.sort(jnp.where(ok_BGP, idx_BGP, Sp + jnp.arange(budget, dtype=jnp.int32)), axis=-1)
    keep_valid_BGP = key_BGP < Sp
    return jnp.where(keep_valid_BGP, key_BGP, 0), keep_valid_BGP


def snapkv_indices_reference(votes_BGS, valid_BS, budget: int, window: int, kernel: int = 7, kind: str = "max"):
    """:func:`snapkv_indices` with lists: per row the last ``window`` valid slots, then per group the
    candidates sorted by (pooled vote descending, slot), the first ``budget - window`` kept."""
    votes = np.asarray(jnp.asarray(votes_BGS, jnp.float32), np.float64)
    B, G, S = votes.shape
    valid_BS = np.ones((B, S), bool) if valid_BS is None else np.asarray(valid_BS, bool)
    idx, ok = np.zeros((B, G, budget), np.int32), np.zeros((B, G, budget), bool)
    for b in range(B):
        real = [s for s in range(S) if valid_BS[b, s]]
        win = real[max(len(real) - window, 0):] if window else []
        cands = [s for s in real if s not in win]
        cand_mask = np.zeros(S, bool)
        cand_mask[cands] = True
        for g in range(G):
            pooled = _pool_reference(votes[b, g], kernel, kind, cand_mask)
            chosen = sorted(cands, key=lambda s: (-pooled[s], s))[:budget - window]
            kept = sorted(win + chosen)
            idx[b, g, :len(kept)] = kept
            ok[b, g, :len(kept)] = True
    return jnp.asarray(idx), jnp.asarray(ok)


def pyramid_budgets(n_layers: int, avg_budget: int, window: int, beta: float = 20.0) -> list[int]:
    """PyramidKV per-layer budgets (layer 0 = bottom gets the most), summing to n_layers * avg_budget.

    With k = avg_budget - window non-window slots per layer on average, the top layer gets
    k_top = k / beta, the bottom k_0 = 2k - k_top, and layer l the linear interpolation
    k_0 - (k_0 - k_top) * l / (L - 1) (exact fractions). These are floored and the remainder goes
    +1 to the bottom layers, then any layer below one non-window slot is raised to one, taken from the
    largest layers; every layer then gets ``window`` on top. The result is non-increasing with depth
    and every entry is >= window + 1; beta = 1 is uniform. n_layers == 1 returns [avg_budget].
    ValueError for n_layers < 1, window < 0, avg_budget <= window or beta < 1.
    """
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive int (got {n_layers!r}); pass n_layers >= 1")
    if window < 0 or avg_budget <= window:
        raise ValueError(f"PyramidKV needs 0 <= window < avg_budget (got window={window}, "
                         f"avg_budget={avg_budget}); raise avg_budget or lower window")
    if not beta >= 1:
        raise ValueError(f"PyramidKV beta must be >= 1 (got {beta}); beta=1 gives uniform budgets")
    if n_layers == 1:
        return [avg_budget]
    L, k = n_layers, avg_budget - window
    k_top = Fraction(k) / Fraction(beta)
    k_0 = 2 * k - k_top
    exact = [k_0 - (k_0 - k_top) * Fraction(l, L - 1) for l in range(L)]
    ks = [int(x) for x in exact]  # floor: every term is >= 0
    for l in range(L * k - sum(ks)):  # the remainder (< L) to the bottom layers
        ks[l] += 1
    while min(ks) < 1:  # zeros form a suffix: raise the first; take from the last of the largest
        ks[ks.index(0)] += 1
        ks[max(i for i in range(L) if ks[i] == max(ks))] -= 1
    return [kl + window for kl in ks]


def gather_kv(x_BSGK, idx_BGP):
    """Per-group slot gather: ``out[b, p, g, ...] = x[b, idx[b, g, p], g, ...]``.

    ``x_BSGK`` [B, S, G, K] (any trailing dims after G), ``idx_BGP`` int [B, G, P]; returns
    [B, P, G, K] in x's dtype. For indices shared by all groups (StreamingLLM's ``idx_BP``) pass
    ``jnp.broadcast_to(idx_BP[:, None], (B, G, P))``.
    """
    idx_BPG = jnp.swapaxes(idx_BGP, 1, 2)
    idx = idx_BPG.reshape(idx_BPG.shape + (1,) * (x_BSGK.ndim - 3))
    return jnp.take_along_axis(x_BSGK, idx, axis=1)


def gather_per_group(x_BGS, idx_BGP):
    """Per-group gather of a per-slot array: ``out[b, g, p] = x[b, g, idx[b, g, p]]`` -> [B, G, P].

    ``x_BGS`` may also be [B, S] (shared by all groups, e.g. positions); it is broadcast to G.
    """
    if x_BGS.ndim == 2:
        x_BGS = jnp.broadcast_to(x_BGS[:, None], (x_BGS.shape[0], idx_BGP.shape[1], x_BGS.shape[1]))
    return jnp.take_along_axis(x_BGS, idx_BGP, axis=2)


def streaming_indices(n_valid_B, sink: int, recent: int, S: int):
    """StreamingLLM's kept slots: the first ``sink`` and the last ``recent`` of n_b valid slots 0..n_b-1.

    Returns ``(idx_BP, valid_BP)`` with P = sink + recent: int32 indices ascending and unique where
    valid. A row with n_b <= P keeps all its n_b slots (entries 0..n_b-1), the rest point at slot 0
    and are False. ``n_valid_B`` (int [B]) is clipped to 0..S. ValueError for negative sink/recent
    or sink + recent == 0.
    """
    if sink < 0 or recent < 0 or sink + recent == 0:
        raise ValueError(f"StreamingLLM needs sink >= 0, recent >= 0 and sink + recent > 0 "
                         f"(got sink={sink}, recent={recent}); raise sink or recent")
    P = sink + recent
    n_B1 = jnp.clip(jnp.asarray(n_valid_B, jnp.int32), 0, S)[:, None]
    j_1P = jnp.arange(P, dtype=jnp.int32)[None, :]
    full_BP = jnp.where(j_1P < sink, j_1P, n_B1 - P + j_1P)  # n_b > P: sink head, then recent tail
    short_BP = n_B1 <= P
    idx_BP = jnp.where(short_BP, j_1P, full_BP)
    valid_BP = jnp.where(short_BP, j_1P < n_B1, True)
    return jnp.where(valid_BP, idx_BP, 0), valid_BP


def streaming_indices_reference(n_valid_B, sink: int, recent: int, S: int):
    """:func:`streaming_indices` with lists: all n_b slots when they fit, else the first ``sink`` and
    the last ``recent``."""
    P = sink + recent
    n_B = np.clip(np.asarray(n_valid_B), 0, S)
    idx, ok = np.zeros((len(n_B), P), np.int32), np.zeros((len(n_B), P), bool)
    for b, n in enumerate(n_B):
        kept = list(range(n)) if n <= P else list(range(sink)) + list(range(n - recent, n))
        idx[b, :len(kept)] = kept
        ok[b, :len(kept)] = True
    return jnp.asarray(idx), jnp.asarray(ok)
