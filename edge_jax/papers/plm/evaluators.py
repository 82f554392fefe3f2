"""PLM's evaluator: activation sparsity (Algorithm 1) after training, on the first
``train.sparsity_batches`` validation batches; the whole sweep goes to ``workdir/sparsity.json``."""
from __future__ import annotations

from edge_jax.papers.plm.sparsity import sparsity_metrics
from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.hooks import EvalContext
from edge_jax.utils.atomic import write_json_atomic


def activation_sparsity(ctx: EvalContext) -> dict:
    """Algorithm 1's scalar metrics (the sweep is written by the lead process)."""
    scalars, sweep = sparsity_metrics(ctx.run.model, ctx.params, ctx.eval_batches[:ctx.config.train.sparsity_batches])
    path = ctx.output("sparsity.json")
    if path:
        write_json_atomic(path, sweep)
    return scalars


EVALUATORS.register("sparsity", Evaluator(enabled=lambda config: config.train.sparsity_batches > 0,
                                          run=activation_sparsity))
