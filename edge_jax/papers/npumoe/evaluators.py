"""NPUMoE's part of a training run: calibrate before an evaluation-only run whose strategy needs
expert loads, and after training compare the strategy with dropless (:func:`evaluate.moe_metrics`)."""
from __future__ import annotations

from edge_jax.papers.npumoe.config import needs_calibration
from edge_jax.papers.npumoe.run_metrics import calibrate_run, moe_metrics
from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.hooks import PREPARE_HOOKS, EvalContext, RunContext


@PREPARE_HOOKS.register("moe_calibration")
def calibrate_first(ctx: RunContext):
    """A run with ``train.steps=0`` (config validation requires it) whose strategy needs calibrated loads
    and has no ``moe.plan`` calibrates on its params first; ``calibration.json/.md`` go to the workdir."""
    if needs_calibration(ctx.config) and not ctx.run.model.cfg.moe_exec.plans:
        return calibrate_run(ctx.run, ctx.params, ctx.workdir if ctx.lead else None)[0]
    return ctx.run


def _moe(ctx: EvalContext) -> dict:
    return moe_metrics(ctx.run, ctx.params, ctx.eval_batches, ctx.config.moe.time_batches)


EVALUATORS.register("moe", Evaluator(enabled=lambda config: config.model.moe_experts > 0, run=_moe))
