"""EdgeInfinite's evaluator: exact match and answer NLL on the built-in long-context tasks with the
inference method ``longctx.method`` (EdgeInfinite or a KV-cache baseline), after training."""
from __future__ import annotations

from edge_jax.papers.edgeinfinite.longctx_eval import evaluate_longctx
from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.hooks import EvalContext


def long_context(ctx: EvalContext) -> dict:
    return evaluate_longctx(ctx.run.model, ctx.params, ctx.run.tokenizer, ctx.config)


EVALUATORS.register("longctx", Evaluator(enabled=lambda config: bool(config.longctx.method), run=long_context))
