"""NPUMoE runtime (§4.2-4.3): a host-side executor of separately compiled static expert graphs.

:func:`edge_jax.layers.moe.execute.capacity_moe` runs a whole layer as ONE jitted function, so XLA sees a
single program however many groups the plan has. On the NPU each static group is its own compute
graph, launched from the host, and every launch costs dispatch overhead. :class:`LayerRuntime` runs
a chunk the same way, each step a separate jitted call made from Python:

1. ``pack``: :func:`~edge_jax.layers.moe.execute.pack` (slots of the token copies, the lowest-score
   overflow left out of the buffer) and the gather of token rows into each group's zero-padded
   ``[X, Z, D]`` buffer (X experts, Z their capacity);
2. one call per static group: :func:`~edge_jax.layers.kernels.expert_ffn.grouped_swiglu` on that group's
   buffer and its experts' valid-row counts, with its resident weights (pre-sliced and stacked per group
   at construction): XLA's SwiGLU, or the ``expert_ffn`` Pallas kernel under ``kernels`` (``model.kernels``);
3. one call for the fallback (cold) experts: :func:`~edge_jax.layers.moe.execute.host_experts` on the host
   CPU, each expert on exactly its tokens (the paper's CPU fallback; with an accelerator the inputs
   come to the host and the result goes back). With ``overflow="fallback"`` the same call also runs
   the static experts' overflow copies (their mask comes to the host with the inputs), so nothing is
   dropped; it is then made even when the plan has no cold experts;
4. ``scatter``: the weighted scatter-add of the kept rows back to their tokens, plus the fallback.

When the device is the host CPU itself, the fallback's numpy runs on one BLAS thread
(:func:`host_blas_threads`): a multithreaded OpenBLAS spinning against XLA's own threads on the same
cores made rounds up to 40x slower, at random, on a 2-core machine.

So ``plan.expert_calls(...)`` expert calls per chunk are real dispatches (:attr:`LayerRuntime.expert_calls`;
:attr:`LayerRuntime.dispatched` counts those the last chunk made). The output equals
``capacity_moe(..., overflow=overflow)[0]`` for the same plan. :func:`time_runtime` gives seconds per token.
"""
from __future__ import annotations

import contextlib
import functools

import jax
import numpy as np

from edge_jax.layers.kernels.expert_ffn import grouped_swiglu
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import LayerPlan
from edge_jax.layers.moe.strategies import OVERFLOW_POLICIES
from edge_jax.utils.timing import time_interleaved


def _pack_fn(plan: LayerPlan, overflow: str):
    """Jitted ``(x_ND, ids_NJ, score_N, valid_N) -> (buffers [X, Z, D] per group, valid rows [X] per
    group, slot_A, kept_A, exact_NJ)``; ``exact_NJ``: the copies for the fallback call when the overflow
    runs there (else None)."""
    def pack(x_ND, ids_NJ, score_N, valid_N):
        slot_A, kept_A, static_A = execute.pack(ids_NJ, score_N, valid_N, plan)
        count_E = execute.kept_counts(ids_NJ, kept_A, plan.n_experts)
        counts = tuple(count_E[np.asarray(g)] for g in plan.groups)
        exact_NJ = (execute.exact_copies(ids_NJ, valid_N, kept_A, static_A, overflow)
                    if OVERFLOW_POLICIES.get(overflow).exact else None)  # dropping: the host needs no mask
        return tuple(execute.group_buffers(x_ND, ids_NJ, slot_A, plan)), counts, slot_A, kept_A, exact_NJ
    return jax.jit(pack)


@functools.lru_cache(maxsize=1)
def _blas_controller():
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # optional: without it the host BLAS keeps its threads
        return None
    return ThreadpoolController()


def host_blas_threads():
    """Context for the host fallback's numpy: one BLAS thread when JAX runs on the CPU (the fallback then
    shares its cores with XLA's threads), no change on an accelerator or without ``threadpoolctl``."""
    controller = _blas_controller() if jax.default_backend() == "cpu" else None
    return controller.limit(limits=1, user_api="blas") if controller is not None else contextlib.nullcontext()


@jax.jit
def _scatter(x_ND, ys_XZD, slot_A, kept_A, w_NJ, fallback_ND):
    """:func:`~edge_jax.layers.moe.execute.scatter_rows`, plus the fallback experts' result (or None)."""
    y_ND = execute.scatter_rows(x_ND, ys_XZD, slot_A, kept_A, w_NJ)
    return y_ND if fallback_ND is None else y_ND + fallback_ND


class LayerRuntime:
    """One MoE layer under a static :class:`LayerPlan`, run as separately dispatched static graphs.

    ``experts = (gate_EDF, up_EDF, down_EFD)``; the fallback experts' weights stay on the host (all
    experts' with ``overflow="fallback"``); ``kernels``: ``model.kernels`` for the static groups;
    ``overflow``: ``moe.overflow``, the static experts' overflow dropped or run in the fallback call.
    """

    def __init__(self, plan: LayerPlan, experts, kernels: str = "xla", overflow: str = "drop"):
        gate, up, down = experts
        if gate.shape[0] != plan.n_experts:
            raise ValueError(f"plan has {plan.n_experts} experts, the weights {gate.shape[0]}")
        self.plan = plan
        self.exact_overflow = OVERFLOW_POLICIES.get(overflow).exact
        self.exact_experts = plan.exact_experts(self.exact_overflow)
        self.expert_calls = plan.expert_calls(self.exact_overflow)
        self.dispatched = 0
        self._pack = _pack_fn(plan, overflow)
        self._groups = []  # (jitted expert call, resident (gate_XDF, up_XDF, down_XFD)) per static group
        for group in plan.groups:
            idx = np.asarray(group)
            call = jax.jit(functools.partial(grouped_swiglu, mode=kernels))
            self._groups.append((call, tuple(jax.device_put(w[idx]) for w in experts)))
        self._host = tuple(np.asarray(w) for w in experts) if self.exact_experts else None

    def __call__(self, x_ND, ids_NJ, w_NJ, score_N, valid_N):
        """``y_ND`` for one chunk: pack, one call per group, the fallback call, scatter."""
        calls = 0
        bufs, counts, slot_A, kept_A, exact_NJ = self._pack(x_ND, ids_NJ, score_N, valid_N)
        ys = []
        for (expert_call, weights), x_XZD, count_X in zip(self._groups, bufs, counts):
            ys.append(expert_call(x_XZD, *weights, count_X))
            calls += 1
        fallback_ND = None
        if self.exact_experts:
            fallback_ND = self.fallback(x_ND, ids_NJ, w_NJ, valid_N, exact_NJ)
            calls += 1
        self.dispatched = calls
        return _scatter(x_ND, tuple(ys), slot_A, kept_A, w_NJ, fallback_ND)

    def fallback(self, x_ND, ids_NJ, w_NJ, valid_N, exact_NJ=None):
        """The cold experts on the host CPU (numpy, exact token counts), the paper's fallback path: the
        inputs come to the host and the result goes back to the device. With ``exact_NJ`` (the pack's
        mask; ``overflow="fallback"``) the copies it marks, of any expert: the cold experts' copies and
        the static experts' overflow."""
        if exact_NJ is None and not self.plan.fallback:
            raise ValueError("this plan has no fallback experts")
        x, ids, w, valid = jax.device_get((x_ND, ids_NJ, w_NJ, valid_N))
        mask = None if exact_NJ is None else jax.device_get(exact_NJ)
        subset = self.plan.fallback if exact_NJ is None else self.exact_experts
        with host_blas_threads():
            y = execute.host_experts(x, ids, w, valid, self._host, subset, mask)
        return jax.device_put(y)


def time_runtime(runtime: LayerRuntime, chunks, repeats: int) -> float:
    """Seconds per (valid) token to run ``chunks`` (tuples ``(x, ids, w, score, valid)``) through
    ``runtime``: one warm-up round, then ``repeats`` rounds each blocked on at its end; the median."""
    tokens = sum(int(np.sum(np.asarray(c[4]))) for c in chunks)
    secs = time_interleaved({"runtime": lambda: [runtime(*c) for c in chunks]}, repeats, max(tokens, 1))
    return secs["runtime"]
