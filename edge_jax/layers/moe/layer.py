"""Mixture-of-experts FFN (NPUMoE §2, §4): a top-k router over SwiGLU experts.

Params: ``router`` [D, E] (float32 logits), ``gate``/``up`` [E, D, F], ``down`` [E, F, D]; with
``shared_d_ff`` > 0 also ``shared/{gate, up, down}/kernel``, one SwiGLU MLP on every token added to the
output (DeepSeek-V2's shared experts, ``n_shared_experts * moe_intermediate_size`` wide).
The router kind ``router`` (:data:`~edge_jax.layers.moe.routers.ROUTERS`) picks the top-k experts and
their combine weights from the logits; the default ``softmax`` takes the top-k softmax probabilities
``p`` as weights, or with ``renormalize`` ``p / sum(top-k p)``. Execution follows
:class:`~edge_jax.layers.moe.plan.MoEExec` (:mod:`edge_jax.layers.moe.execute`): the capacity-bound strategies
split the ``B*T`` tokens into prefill chunks of ``execution.chunk`` tokens that each get the plan's
capacities (the last chunk is padded with invalid tokens); ``kernels`` (``model.kernels``) picks how
the static groups run: XLA or the ``expert_ffn`` Pallas kernel (:mod:`edge_jax.layers.kernels.expert_ffn`).
The exact path (the fallback experts, and with ``execution.overflow="fallback"`` every chunk's overflow)
is one ragged call over all the chunks' tokens.

Sown per call: ``intermediates/routing`` = {``ids`` top-k experts [B,T,J], ``probs`` their router (softmax)
probabilities, ``weights`` the combine weights, ``saliency`` [B,T], ``x`` the layer input [B,T,D]} for
calibration, traces and timing; ``intermediates/moe_stats`` (token-copy counts, see
:func:`~edge_jax.layers.moe.execute.capacity_moe`); ``losses/load_balance`` = ``weight * E * sum_e f_e P_e``
(Switch Transformer: f = share of copies, P = mean probability), which the train step adds.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.errors import ConfigError
from edge_jax.layers.ffn import FFN
from edge_jax.layers.kernels import backend
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import LayerPlan, MoEExec
from edge_jax.layers.moe.routers import ROUTERS, RouterParams
from edge_jax.layers.moe.strategies import DROP_POLICIES, MOE_STRATEGIES, OVERFLOW_POLICIES
from edge_jax.registry import SECTIONS, Section
from edge_jax.sharding import per_shard

STAT_KEYS = ("routed", "kept", "dropped", "fallback", "padded")  # execute.static_moe's stats


class MoE(nn.Module):
    n_experts: int
    top_k: int
    d_ff: int
    renormalize: bool = False
    aux_weight: float = 0.0
    execution: MoEExec = MoEExec()
    plan: LayerPlan | None = None
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    kernels: str = "xla"  # model.kernels (edge_jax.layers.kernels.backend)
    router: str = "softmax"  # model.moe_router (edge_jax.layers.moe.routers.ROUTERS)
    router_params: RouterParams = RouterParams()
    shared_d_ff: int = 0  # model.moe_shared_d_ff: the shared experts' SwiGLU width (0: none)

    def _param(self, name, shape, axes):
        init = nn.with_logical_partitioning(nn.initializers.normal(self.init_std), axes)
        return self.param(name, init, shape, jnp.dtype(self.param_dtype))

    @nn.compact
    def __call__(self, x_BTD, saliency_BT=None):
        b, t, d = x_BTD.shape
        e, f = self.n_experts, self.d_ff
        router = self._param("router", (d, e), ("embed", None))
        dt = jnp.dtype(self.dtype)
        experts = tuple(a.astype(dt) for a in (self._param("gate", (e, d, f), ("expert", "embed", "mlp")),
                                               self._param("up", (e, d, f), ("expert", "embed", "mlp")),
                                               self._param("down", (e, f, d), ("expert", "mlp", "embed"))))
        logits_BTE = x_BTD.astype(jnp.float32) @ router.astype(jnp.float32)
        ids_BTJ, w_BTJ, top_p, probs_BTE = ROUTERS.get(self.router)(logits_BTE, self.top_k, self.renormalize,
                                                                    self.router_params)
        saliency_BT = jnp.ones((b, t), jnp.float32) if saliency_BT is None else saliency_BT
        self.sow("intermediates", "routing", {"ids": ids_BTJ, "probs": top_p, "weights": w_BTJ,
                                              "saliency": saliency_BT, "x": x_BTD})
        if self.aux_weight:
            share_E = jnp.mean(jax.nn.one_hot(ids_BTJ, e, dtype=jnp.float32), axis=(0, 1, 2))
            self.sow("losses", "load_balance", self.aux_weight * e * jnp.sum(share_E * jnp.mean(probs_BTE, (0, 1))))
        x_ND, ids_NJ, w_NJ = x_BTD.reshape(-1, d).astype(dt), ids_BTJ.reshape(-1, self.top_k), w_BTJ.reshape(
            -1, self.top_k)
        strategy = MOE_STRATEGIES.get(self.execution.strategy)
        if self.execution.strategy == "dropless" or (self.plan is None and self.is_initializing()):  # no plan yet
            y_ND = execute.dropless(x_ND, ids_NJ, w_NJ, experts)
        elif not strategy.capacity_bound:
            y_ND = strategy.run(x_ND, ids_NJ, w_NJ, experts)
        else:
            y_ND = self._capacity(x_ND, ids_NJ, w_NJ, saliency_BT.reshape(-1), experts)
        y_BTD = y_ND.reshape(b, t, d).astype(x_BTD.dtype)
        if self.shared_d_ff:
            y_BTD = y_BTD + FFN("swiglu", self.shared_d_ff, self.init_std, self.dtype, self.param_dtype,
                                name="shared")(x_BTD).astype(x_BTD.dtype)
        return y_BTD

    def _capacity(self, x_ND, ids_NJ, w_NJ, sal_N, experts):
        if self.plan is None:
            raise ValueError(f"moe strategy {self.execution.strategy!r} needs a capacity plan per MoE layer; "
                             "calibrate first (edge-jax moe calibrate) or set moe.capacity")
        if self.plan.n_experts != self.n_experts:
            raise ValueError(f"the capacity plan has {self.plan.n_experts} experts but the layer has "
                             f"{self.n_experts}; recalibrate with edge-jax moe calibrate")
        n, top_k = ids_NJ.shape
        chunks = execute.chunked(x_ND, ids_NJ, w_NJ, sal_N, self.execution.chunk, self.execution.drop)
        y_OND, exact_ONJ, stats = self._chunks(chunks, experts)
        self.sow("intermediates", "moe_stats", {k: jnp.sum(v) for k, v in stats.items()})
        y_ND = y_OND.reshape(-1, x_ND.shape[-1])[:n]
        subset = self.plan.exact_experts(self.execution.exact_overflow)
        if subset:  # the fallback experts (and the overflow), exactly, once for all chunks
            y_ND = y_ND + execute.ragged(x_ND, ids_NJ, w_NJ, experts, subset, exact_ONJ.reshape(-1, top_k)[:n])
        return y_ND

    def _chunks(self, chunks, experts):
        """``static_moe`` on every prefill chunk (vmapped). With the ``expert_ffn`` kernel, which XLA
        cannot partition, each device runs its own chunks on a mesh (experts whole on every device)."""
        def run(*arrays):
            *chunk_arrays, gate, up, down = arrays
            y, exact, stats = jax.vmap(lambda *a: execute.static_moe(
                *a, (gate, up, down), self.plan, self.execution.overflow, self.kernels))(*chunk_arrays)
            return (y, exact, *(stats[k] for k in STAT_KEYS))

        if backend.use_pallas(self.kernels, "expert_ffn"):
            rows = [("batch",) + (None,) * (a.ndim - 1) for a in chunks]
            run = per_shard(run, (*rows, *[(None, None, None)] * 3),
                            (rows[0], ("batch", None, None)) + (("batch",),) * len(STAT_KEYS))
        y_OND, exact_ONJ, *stats = run(*chunks, *experts)
        return y_OND, exact_ONJ, dict(zip(STAT_KEYS, stats))


@dataclasses.dataclass(frozen=True)
class MoEKeys:
    """``model.*`` keys of the MoE FFN: a top-k router over SwiGLU experts in place of the FFN in
    ``moe_layers`` (empty: all); ``moe_experts`` 0 keeps the dense FFN; ``moe_d_ff`` 0 takes ``d_ff``;
    a Switch load-balancing loss of ``moe_aux_weight``. ``moe_router`` is the router kind
    (:mod:`edge_jax.layers.moe.routers`: ``softmax``, ``sparsemixer`` (top-2, ``moe_jitter_eps``),
    ``group_limited`` (``moe_n_group`` groups, the ``moe_topk_group`` best kept)); every kind scales its
    weights by ``moe_routed_scale``; ``moe_shared_d_ff`` > 0 adds a shared SwiGLU expert of that width."""
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_d_ff: int = 0
    moe_renormalize: bool = False
    moe_layers: tuple = ()
    moe_aux_weight: float = 0.0
    moe_router: str = "softmax"
    moe_jitter_eps: float = 0.01
    moe_n_group: int = 1
    moe_topk_group: int = 1
    moe_routed_scale: float = 1.0
    moe_shared_d_ff: int = 0


@dataclasses.dataclass(frozen=True)
class ExecutionKeys:
    """``moe.*`` keys of how the MoE layers execute (:class:`MoEExec`): the strategy, the prefill
    chunk whose tokens share one set of capacities, which overflow leaves the buffer first (``drop``),
    and what happens to it (``overflow``: ``drop`` it, or run it exactly on the ``fallback`` path)."""
    strategy: str = "dropless"
    chunk: int = 512
    drop: str = "saliency"
    overflow: str = "drop"


def _validate_model(c) -> None:
    m = c.model
    if m.moe_experts < 0 or m.moe_d_ff < 0:
        raise ConfigError("model.moe_experts and model.moe_d_ff must be >= 0 (moe_experts 0: a dense FFN)")
    if not m.moe_experts:
        return
    if not 1 <= m.moe_top_k <= m.moe_experts:
        raise ConfigError(f"model.moe_top_k={m.moe_top_k} must lie in [1, model.moe_experts={m.moe_experts}]; "
                          "lower the top-k or add experts")
    if any(not 0 <= i < m.n_layers for i in m.moe_layers) or len(set(m.moe_layers)) != len(m.moe_layers):
        raise ConfigError(f"model.moe_layers={tuple(m.moe_layers)} must be distinct layer indices in [0, "
                          f"{m.n_layers}); empty means every layer")
    _validate_router(m)


def _validate_router(m) -> None:
    ROUTERS.check(m.moe_router)
    if m.moe_shared_d_ff < 0 or m.moe_routed_scale <= 0 or m.moe_jitter_eps < 0:
        raise ConfigError("model.moe_shared_d_ff must be >= 0, model.moe_routed_scale > 0 and "
                          "model.moe_jitter_eps >= 0")
    if m.moe_router == "sparsemixer" and m.moe_top_k != 2:
        raise ConfigError(f"model.moe_router='sparsemixer' picks 2 experts; set model.moe_top_k=2 (got {m.moe_top_k})")
    if m.moe_router == "group_limited":
        g, kg = m.moe_n_group, m.moe_topk_group
        if g < 1 or m.moe_experts % g or not 1 <= kg <= g:
            raise ConfigError(f"model.moe_n_group={g} must divide model.moe_experts={m.moe_experts} and "
                              f"model.moe_topk_group={kg} lie in [1, {g}]")
        if m.moe_top_k > kg * (m.moe_experts // g):
            raise ConfigError(f"model.moe_top_k={m.moe_top_k} exceeds the {kg * (m.moe_experts // g)} experts of "
                              f"the model.moe_topk_group={kg} kept groups; keep more groups")


def _validate_execution(c) -> None:
    x = c.moe
    MOE_STRATEGIES.check(x.strategy)
    DROP_POLICIES.check(x.drop)
    OVERFLOW_POLICIES.check(x.overflow)
    if not c.model.moe_experts and x.strategy != "dropless":
        raise ConfigError(f"moe.strategy={x.strategy!r} applies to MoE models; set model.moe_experts > 0")
    if x.chunk <= 0:
        raise ConfigError(f"moe.chunk={x.chunk} must be positive")


SECTIONS.register("moe_model", Section("model", MoEKeys, _validate_model))
SECTIONS.register("moe_execution", Section("moe", ExecutionKeys, _validate_execution))
