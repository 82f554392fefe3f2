"""Expert execution strategies for one chunk of routed tokens, all static-shaped under jit.

Every function takes the chunk's tokens ``x_ND``, their top-k expert ids ``ids_NJ`` and combine
weights ``w_NJ``, and the stacked SwiGLU expert weights ``experts = (gate_EDF, up_EDF, down_EFD)``:

- :func:`dropless`: every expert on every token, combined by the sparse router weights (exact).
- :func:`ragged`: the token copies sorted by expert and run with ``jax.lax.ragged_dot`` (exact).
- :func:`capacity_moe`: NPUMoE §4.1-4.3 under a :class:`~edge_jax.layers.moe.plan.LayerPlan`: each static
  group of X same-capacity experts is one dense call on a zero-padded ``[X, Z, D]`` buffer, Z the capacity
  (the ``expert_ffn`` Pallas kernel under ``model.kernels``, :mod:`edge_jax.layers.kernels.expert_ffn`), the
  token copies beyond an expert's capacity (its overflow) leave the buffer lowest-score first (``score``:
  the saliency, or minus the position), valid rows are scattered back weighted by the router; fallback
  experts take the exact ragged path. The overflow is dropped (``overflow="drop"``) or run exactly on that
  same fallback path (``overflow="fallback"``: nothing is dropped, the output is the dropless one).
  :func:`static_moe` is its static part, which leaves the exact path to the caller.
- :func:`host_experts`: NPUMoE's CPU fallback: the given experts in numpy on the host, each on
  exactly the tokens it got (dynamic shapes, no padding); the runtime's path for cold experts.
- :func:`moe_reference`: a Python loop over experts, the test reference for all of them.

On CPU, ``jax.lax.ragged_dot`` computes every group's rows against every expert (a masked dense
dot), so :func:`ragged` costs as much as running each of its experts on all token copies there;
it is exact, and the in-model path of the fallback experts, but not a fast path on CPU.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.kernels.expert_ffn import grouped_swiglu, swiglu
from edge_jax.layers.moe.plan import LayerPlan
from edge_jax.layers.moe.strategies import (
    DROP_POLICIES,
    MOE_STRATEGIES,
    OVERFLOW_POLICIES,
    Overflow,
    Strategy,
)


def flat_copies(ids_NJ, w_NJ):
    """The ``N*J`` token copies, token-major: expert ids, token indices and weights, each ``[A]``."""
    n, k = ids_NJ.shape
    return ids_NJ.reshape(-1), jnp.repeat(jnp.arange(n), k), w_NJ.reshape(-1)


def dropless(x_ND, ids_NJ, w_NJ, experts):
    gate, up, down = experts
    n_experts = gate.shape[0]
    y_END = swiglu(jnp.broadcast_to(x_ND, (n_experts, *x_ND.shape)), gate, up, down)
    combine_NE = jnp.sum(jax.nn.one_hot(ids_NJ, n_experts, dtype=w_NJ.dtype) * w_NJ[..., None], axis=1)
    return jnp.einsum("ne,end->nd", combine_NE.astype(y_END.dtype), y_END)


def ragged(x_ND, ids_NJ, w_NJ, experts, subset: tuple[int, ...] | None = None, mask_NJ=None):
    """Exact: every token copy routed to an expert of ``subset`` (default: all) runs that expert; with
    ``mask_NJ`` (bool ``[N, J]``) only the copies it marks."""
    gate, up, down = experts
    n_experts = gate.shape[0]
    subset = tuple(range(n_experts)) if subset is None else tuple(subset)
    local = np.full(n_experts, len(subset), np.int32)  # experts outside the subset sort last, unrun
    local[list(subset)] = np.arange(len(subset))
    e_A, t_A, w_A = flat_copies(ids_NJ, w_NJ)
    key_A = jnp.asarray(local)[e_A]
    if mask_NJ is not None:  # unmarked copies sort last too
        key_A = jnp.where(mask_NJ.reshape(-1), key_A, len(subset))
    order = jnp.argsort(key_A, stable=True)
    sizes = jnp.bincount(key_A, length=len(subset) + 1)[:len(subset)].astype(jnp.int32)
    idx = jnp.asarray(subset)
    xs = x_ND[t_A[order]]
    h = jax.nn.silu(jax.lax.ragged_dot(xs, gate[idx], sizes)) * jax.lax.ragged_dot(xs, up[idx], sizes)
    ys = jax.lax.ragged_dot(h, down[idx], sizes)  # rows past the subset's copies come out zero
    return jnp.zeros_like(x_ND).at[t_A[order]].add(ys * w_A[order, None].astype(ys.dtype))


def pack(ids_NJ, score_N, valid_N, plan: LayerPlan):
    """Buffer slot of every token copy (``buffer_rows`` when dropped or on the fallback path) and
    whether it was kept. Within an expert, copies are ranked by ``score`` (highest first; ties by
    token order); the first ``capacity`` are kept."""
    n_experts, rows = plan.n_experts, plan.buffer_rows
    cap_E = jnp.asarray(plan.capacity, jnp.int32)
    e_A, t_A, _ = flat_copies(ids_NJ, ids_NJ)
    static_A = valid_N[t_A] & (cap_E[e_A] > 0)
    key_A = jnp.where(static_A, e_A, n_experts)
    order = jnp.lexsort((-score_N[t_A].astype(jnp.float32), key_A))
    sorted_key = key_A[order]
    rank = jnp.arange(sorted_key.shape[0]) - jnp.searchsorted(sorted_key, sorted_key, side="left")
    pos_A = jnp.zeros_like(rank).at[order].set(rank)
    kept_A = static_A & (pos_A < cap_E[e_A])
    slot_A = jnp.where(kept_A, jnp.asarray(plan.offsets())[e_A] + pos_A, rows)
    return slot_A, kept_A, static_A


def kept_counts(ids_NJ, kept_A, n_experts: int):
    """``[E]`` int32: the kept copies of each expert, i.e. its valid buffer rows (``min(routed, capacity)``)."""
    e_A, _, _ = flat_copies(ids_NJ, ids_NJ)
    return jnp.zeros(n_experts, jnp.int32).at[e_A].add(kept_A.astype(jnp.int32))


def group_buffers(x_ND, ids_NJ, slot_A, plan: LayerPlan) -> list:
    """The zero-padded ``[X, Z, D]`` input of each static group: the kept copies at their slots, cut
    from one ``[Y, D]`` buffer (every group's rows, then one zero row)."""
    _, t_A, _ = flat_copies(ids_NJ, ids_NJ)
    buf_YD = jnp.zeros((plan.buffer_rows + 1, x_ND.shape[-1]), x_ND.dtype).at[slot_A].set(x_ND[t_A])
    bufs, row = [], 0
    for group in plan.groups:
        c = plan.capacity[group[0]]
        bufs.append(buf_YD[row:row + len(group) * c].reshape(len(group), c, -1))
        row += len(group) * c
    return bufs


def scatter_rows(x_ND, ys_XZD, slot_A, kept_A, w_NJ):
    """Weighted scatter-add of the groups' output rows to their tokens (dropped copies read the zero
    row past the buffer's end, the last of the ``[Y, D]`` rows)."""
    _, t_A, w_A = flat_copies(w_NJ, w_NJ)
    zero_1D = jnp.zeros((1, x_ND.shape[-1]), x_ND.dtype)
    y_YD = jnp.concatenate([y.reshape(-1, x_ND.shape[-1]) for y in ys_XZD] + [zero_1D])
    return jnp.zeros_like(x_ND).at[t_A].add(y_YD[slot_A] * jnp.where(kept_A, w_A, 0)[:, None].astype(x_ND.dtype))


def exact_copies(ids_NJ, valid_N, kept_A, static_A, overflow: str = "drop"):
    """``[N, J]`` bool: the token copies the exact fallback path runs: the valid copies of the fallback
    experts and, when ``overflow`` runs it exactly, the static experts' overflow (every valid copy not
    kept in the buffer)."""
    _, t_A, _ = flat_copies(ids_NJ, ids_NJ)
    left_A = ~kept_A if OVERFLOW_POLICIES.get(overflow).exact else ~static_A
    return (valid_N[t_A] & left_A).reshape(ids_NJ.shape)


def static_moe(x_ND, ids_NJ, w_NJ, score_N, valid_N, experts, plan: LayerPlan, overflow: str = "drop",
               kernels: str = "xla"):
    """The static part of :func:`capacity_moe`: ``(y_ND, exact_NJ, stats)``. ``y_ND`` holds the static
    groups' share only; ``exact_NJ`` marks the copies left for the exact path (:func:`exact_copies`),
    which the caller runs over ``plan.exact_experts(...)``, e.g. once for all chunks (``ragged_dot`` does
    not batch under ``vmap``). Stats count token copies: ``routed`` (valid), ``kept`` in the buffer,
    ``dropped`` (overflow, 0 when it runs exactly), ``fallback`` (on the exact path: the fallback experts'
    copies, plus the overflow when it runs exactly), and the buffer's ``padded`` rows."""
    gate, up, down = experts
    slot_A, kept_A, static_A = pack(ids_NJ, score_N, valid_N, plan)
    count_E = kept_counts(ids_NJ, kept_A, plan.n_experts)
    ys = []
    for g, x_XZD in zip(plan.groups, group_buffers(x_ND, ids_NJ, slot_A, plan)):
        idx = np.asarray(g)
        ys.append(grouped_swiglu(x_XZD, gate[idx], up[idx], down[idx], count_E[idx], kernels))
    y_ND = scatter_rows(x_ND, ys, slot_A, kept_A, w_NJ)
    routed = jnp.sum(valid_N) * ids_NJ.shape[1]
    kept, static = jnp.sum(kept_A), jnp.sum(static_A)
    dropped = jnp.zeros_like(kept) if OVERFLOW_POLICIES.get(overflow).exact else static - kept
    stats = {"routed": routed, "kept": kept, "dropped": dropped, "fallback": routed - kept - dropped,
             "padded": plan.buffer_rows - kept}
    return y_ND, exact_copies(ids_NJ, valid_N, kept_A, static_A, overflow), stats


def capacity_moe(x_ND, ids_NJ, w_NJ, score_N, valid_N, experts, plan: LayerPlan, kernels: str = "xla",
                 overflow: str = "drop"):
    """``(y_ND, stats)`` for one chunk: :func:`static_moe`, plus the exact path (the fallback experts and,
    with ``overflow="fallback"``, the overflow) as one ragged call. ``kernels``: ``model.kernels`` for
    the static groups (:func:`~edge_jax.layers.kernels.expert_ffn.grouped_swiglu`)."""
    y_ND, exact_NJ, stats = static_moe(x_ND, ids_NJ, w_NJ, score_N, valid_N, experts, plan, overflow, kernels)
    subset = plan.exact_experts(OVERFLOW_POLICIES.get(overflow).exact)
    if subset:
        y_ND = y_ND + ragged(x_ND, ids_NJ, w_NJ, experts, subset, exact_NJ)
    return y_ND, stats


def chunked(x_ND, ids_NJ, w_NJ, saliency_N, chunk: int, drop: str):
    """The tokens as prefill chunks ``(x, ids, w, score, valid)``, each ``[n_chunks, chunk, ...]``: the
    last chunk padded with invalid tokens; the overflow score is the saliency, or for ``drop=position``
    minus the position in the chunk (the latest tokens drop first)."""
    n = x_ND.shape[0]
    pad = -n % chunk
    padded = [jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)) for a in (x_ND, ids_NJ, w_NJ, saliency_N)]
    score_N = DROP_POLICIES.get(drop)(padded[3], chunk)
    valid_N = jnp.arange(n + pad) < n
    return tuple(a.reshape(-1, chunk, *a.shape[1:]) for a in (*padded[:3], score_N, valid_N))


def host_experts(x_ND, ids_NJ, w_NJ, valid_N, experts, subset, mask_NJ=None) -> np.ndarray:
    """The experts of ``subset`` on the host (numpy; ``experts`` numpy arrays), each on the valid token
    copies routed to it (with ``mask_NJ``: those it marks), weighted; float32 accumulation."""
    gate, up, down = experts
    x, ids, w = np.asarray(x_ND), np.asarray(ids_NJ), np.asarray(w_NJ)
    out = np.zeros(x.shape, np.float32)
    routed = (ids[..., None] == np.asarray(subset)) & np.asarray(valid_N)[:, None, None]
    if mask_NJ is not None:
        routed &= np.asarray(mask_NJ)[..., None]
    for j, e in enumerate(subset):
        toks, ks = np.nonzero(routed[..., j])
        if len(toks):
            xe = x[toks]
            a = xe @ gate[e]
            y = ((a / (1 + np.exp(-a))) * (xe @ up[e])) @ down[e]
            out[toks] += y * w[toks, ks][:, None]  # a token reaches an expert at most once
    return out.astype(x.dtype)


def moe_reference(x_ND, ids_NJ, w_NJ, experts, score_N=None, valid_N=None, capacity=None):
    """Python loop over experts (not for jit). ``capacity[e]`` > 0 keeps that expert's highest-score
    copies only; None or 0 keeps all (dropless / fallback experts)."""
    gate, up, down = (np.asarray(a) for a in experts)
    x, ids, w = np.asarray(x_ND), np.asarray(ids_NJ), np.asarray(w_NJ)
    n = x.shape[0]
    score = np.zeros(n) if score_N is None else np.asarray(score_N, np.float32)
    valid = np.ones(n, bool) if valid_N is None else np.asarray(valid_N)
    out = np.zeros_like(x)
    for e in range(gate.shape[0]):
        toks, ks = np.nonzero((ids == e) & valid[:, None])
        if capacity is not None and capacity[e] > 0:
            keep = np.argsort(-score[toks], kind="stable")[:capacity[e]]
            toks, ks = toks[keep], ks[keep]
        xe = x[toks]
        a = xe @ gate[e]
        y = ((a / (1 + np.exp(-a))) * (xe @ up[e])) @ down[e]
        np.add.at(out, toks, y * w[toks, ks][:, None])
    return out


MOE_STRATEGIES.register("dropless", Strategy(False, dropless))
MOE_STRATEGIES.register("ragged", Strategy(False, ragged))
MOE_STRATEGIES.register("uniform", Strategy(True))
MOE_STRATEGIES.register("npumoe", Strategy(True))
DROP_POLICIES.register("saliency", lambda saliency_N, chunk: saliency_N)  # NPUMoE §3.2
DROP_POLICIES.register("position", lambda saliency_N, chunk: -(jnp.arange(saliency_N.shape[0]) % chunk))
OVERFLOW_POLICIES.register("drop", Overflow(exact=False))  # NPUMoE §4.1: pruned
OVERFLOW_POLICIES.register("fallback", Overflow(exact=True))  # run exactly beside the cold experts
