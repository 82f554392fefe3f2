"""The MoE execution a config asks for: :class:`~edge_jax.layers.moe.plan.MoEExec` with one plan per MoE layer,
attached to every MoE model a run builds (a model hook, :data:`edge_jax.train.hooks.MODEL_HOOKS`)."""
from __future__ import annotations

import dataclasses

import numpy as np

from edge_jax.layers.moe.plan import MoEExec, busiest_capacity, tiered_plan, uniform_plan
from edge_jax.papers.npumoe.calibrate import read_calibration
from edge_jax.papers.npumoe.config import needs_calibration
from edge_jax.train.hooks import MODEL_HOOKS


def layer_plans(config, loads_LE) -> tuple:
    """One plan per MoE layer from ``config.moe`` (and the calibrated loads where it needs them)."""
    m, x = config.model, config.moe
    n_layers = len(loads_LE) if loads_LE is not None else len(m.moe_layers or range(m.n_layers))
    if x.strategy == "uniform":
        caps = [x.capacity or busiest_capacity(load, x.chunk, m.moe_top_k) for load in
                (loads_LE if loads_LE is not None else [None] * n_layers)]
        return tuple(uniform_plan(m.moe_experts, c, x.group) for c in caps)
    return tuple(tiered_plan(load, x.chunk, m.moe_top_k, tuple(x.tier_multipliers), x.group,
                             x.hot_fraction if x.residency else 1.0, x.tiers) for load in loads_LE)


def moe_exec(config, loads_LE=None) -> MoEExec:
    """The execution of ``config.moe``. Calibrated loads come from ``loads_LE`` or the ``moe.plan``
    file; without either, a strategy that needs them gets no plans (calibrate, then call again)."""
    x = config.moe
    base = MoEExec(x.strategy, x.chunk, x.drop, overflow=x.overflow)
    if x.strategy in ("dropless", "ragged"):
        return base
    if loads_LE is None and needs_calibration(config):
        if not x.plan:
            return base
        m = config.model
        loads_LE = read_calibration(x.plan, len(m.moe_layers or range(m.n_layers)), m.moe_experts).loads
    return dataclasses.replace(base, plans=layer_plans(config, None if loads_LE is None else np.asarray(loads_LE)))


@MODEL_HOOKS.register("moe_exec")
def attach_moe_exec(config, cfg):
    """MoE models carry their execution (and capacity plans) in their config; dense ones are left as they are."""
    return dataclasses.replace(cfg, moe_exec=moe_exec(config)) if cfg.moe_experts else cfg
