"""EdgeInfinite's evaluators, after training: exact match and answer NLL on the built-in long-context
tasks with the inference method ``longctx.method`` (EdgeInfinite or a KV-cache baseline), and the
base LM's in-window check (``longctx.inwindow_examples`` > 0)."""
from __future__ import annotations

from edge_jax.papers.edgeinfinite.longctx_eval import evaluate_inwindow, evaluate_longctx
from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.hooks import EvalContext


def long_context(ctx: EvalContext) -> dict:
    return evaluate_longctx(ctx.run.model, ctx.params, ctx.run.tokenizer, ctx.config)


EVALUATORS.register("longctx", Evaluator(enabled=lambda config: bool(config.longctx.method), run=long_context))


def in_window(ctx: EvalContext) -> dict:
    return evaluate_inwindow(ctx.run.model, ctx.params, ctx.run.tokenizer, ctx.config)


EVALUATORS.register("inwindow", Evaluator(enabled=lambda config: config.longctx.inwindow_examples > 0, run=in_window))
