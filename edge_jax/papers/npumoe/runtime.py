"""NPUMoE runtime (§4.2-4.3): a host-side executor of separately compiled static expert graphs.

:func:`edge_jax.layers.moe.execute.capacity_moe` runs a whole layer as ONE jitted function, so XLA sees a
single program however many groups the plan has. On the NPU each static group is its own compute
graph, launched from the host, and every launch costs dispatch overhead. :class:`LayerRuntime` runs
a chunk the same way, each step a separate jitted call made from Python:

1. ``pack``: :func:`~edge_jax.layers.moe.execute.pack` (slots of the token copies, lowest-score overflow
   dropped) and the gather of token rows into each group's zero-padded ``[G, C, d]`` buffer;
2. one call per static group: :func:`~edge_jax.layers.kernels.expert_ffn.grouped_swiglu` on that group's
   buffer and its experts' valid-row counts, with its resident weights (pre-sliced and stacked per group
   at construction): XLA's SwiGLU, or the ``expert_ffn`` Pallas kernel under ``kernels`` (``model.kernels``);
3. one call for the fallback (cold) experts: :func:`~edge_jax.layers.moe.execute.host_experts` on the host
   CPU, each expert on exactly its tokens (the paper's CPU fallback; with an accelerator the inputs
   come to the host and the result goes back);
4. ``scatter``: the weighted scatter-add of the kept rows back to their tokens, plus the fallback.

So ``plan.calls`` expert calls per chunk are real dispatches (:attr:`LayerRuntime.expert_calls`;
:attr:`LayerRuntime.dispatched` counts those the last chunk made). The output equals
``capacity_moe(...)[0]`` for the same plan. :func:`time_runtime` gives seconds per token.
"""
from __future__ import annotations

import functools

import jax
import numpy as np

from edge_jax.layers.kernels.expert_ffn import grouped_swiglu
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import LayerPlan
from edge_jax.utils.timing import time_interleaved


def _pack_fn(plan: LayerPlan):
    """Jitted ``(x_ND, ids_NK, score_N, valid_N) -> (buffers [G, C, d] per group, valid rows [G] per
    group, slot_A, kept_A)``."""
    def pack(x_ND, ids_NK, score_N, valid_N):
        slot_A, kept_A, _ = execute.pack(ids_NK, score_N, valid_N, plan)
        count_E = execute.kept_counts(ids_NK, kept_A, plan.n_experts)
        counts = tuple(count_E[np.asarray(g)] for g in plan.groups)
        return tuple(execute.group_buffers(x_ND, ids_NK, slot_A, plan)), counts, slot_A, kept_A
    return jax.jit(pack)


@jax.jit
def _scatter(x_ND, ys_GCD, slot_A, kept_A, w_NK, fallback_ND):
    """:func:`~edge_jax.layers.moe.execute.scatter_rows`, plus the fallback experts' result (or None)."""
    y_ND = execute.scatter_rows(x_ND, ys_GCD, slot_A, kept_A, w_NK)
    return y_ND if fallback_ND is None else y_ND + fallback_ND


class LayerRuntime:
    """One MoE layer under a static :class:`LayerPlan`, run as separately dispatched static graphs.

    ``experts = (gate_EDF, up_EDF, down_EFD)``; the fallback experts' weights stay on the host;
    ``kernels``: ``model.kernels`` for the static groups.
    """

    def __init__(self, plan: LayerPlan, experts, kernels: str = "xla"):
        gate, up, down = experts
        if gate.shape[0] != plan.n_experts:
            raise ValueError(f"plan has {plan.n_experts} experts, the weights {gate.shape[0]}")
        self.plan = plan
        self.expert_calls = plan.calls
        self.dispatched = 0
        self._pack = _pack_fn(plan)
        self._groups = []  # (jitted expert call, resident (gate_GDF, up_GDF, down_GFD)) per static group
        for group in plan.groups:
            idx = np.asarray(group)
            call = jax.jit(functools.partial(grouped_swiglu, mode=kernels))
            self._groups.append((call, tuple(jax.device_put(w[idx]) for w in experts)))
        self._host = tuple(np.asarray(w) for w in experts) if plan.fallback else None

    def __call__(self, x_ND, ids_NK, w_NK, score_N, valid_N):
        """``y_ND`` for one chunk: pack, one call per group, the fallback call, scatter."""
        calls = 0
        bufs, counts, slot_A, kept_A = self._pack(x_ND, ids_NK, score_N, valid_N)
        ys = []
        for (expert_call, weights), x_GCD, count_G in zip(self._groups, bufs, counts):
            ys.append(expert_call(x_GCD, *weights, count_G))
            calls += 1
        fallback_ND = None
        if self.plan.fallback:
            fallback_ND = self.fallback(x_ND, ids_NK, w_NK, valid_N)
            calls += 1
        self.dispatched = calls
        return _scatter(x_ND, tuple(ys), slot_A, kept_A, w_NK, fallback_ND)

    def fallback(self, x_ND, ids_NK, w_NK, valid_N):
        """The cold experts on the host CPU (numpy, exact token counts), the paper's fallback path: the
        inputs come to the host and the result goes back to the device."""
        if not self.plan.fallback:
            raise ValueError("this plan has no fallback experts")
        x, ids, w, valid = jax.device_get((x_ND, ids_NK, w_NK, valid_N))
        return jax.device_put(execute.host_experts(x, ids, w, valid, self._host, self.plan.fallback))


def time_runtime(runtime: LayerRuntime, chunks, repeats: int) -> float:
    """Seconds per (valid) token to run ``chunks`` (tuples ``(x, ids, w, score, valid)``) through
    ``runtime``: one warm-up round, then ``repeats`` rounds each blocked on at its end; the median."""
    tokens = sum(int(np.sum(np.asarray(c[4]))) for c in chunks)
    secs = time_interleaved({"runtime": lambda: [runtime(*c) for c in chunks]}, repeats, max(tokens, 1))
    return secs["runtime"]
