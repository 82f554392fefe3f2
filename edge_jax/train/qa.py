"""The ``qa`` evaluator: greedy exact match and gold-answer NLL on the dataset's question split.

Enabled by ``train.qa_questions`` (the number of questions, -1 for all); the datasets with a
question split (``facts``, ``longctx``) are generic, so this evaluator is part of the core loop.
"""
from __future__ import annotations

from functools import partial

from edge_jax.data import load_qa
from edge_jax.models.generate import answer_nll, exact_match
from edge_jax.models.inputs import host_inputs
from edge_jax.registry import EVALUATORS, Evaluator


def score_answers(model, params, tokenizer, questions: list[dict], max_new_tokens: int = 16,
                  batch_size: int = 32) -> dict:
    """Greedy exact match and gold-answer NLL of ``questions`` (records with ``prompt`` and ``answer``)."""
    host_fn = partial(host_inputs, model.cfg)
    return {**exact_match(model.apply, params, tokenizer, questions, max_new_tokens, batch_size, host_fn),
            **answer_nll(model.apply, params, tokenizer, questions, batch_size, host_fn)}


def question_answering(run, params, limit: int) -> dict:
    """Greedy exact match and gold-answer NLL on the first ``limit`` questions (all when -1)."""
    questions = load_qa(run.config.data, run.config.data.data_dir)
    questions = questions if limit < 0 else questions[:limit]
    return score_answers(run.model, params, run.tokenizer, questions)


EVALUATORS.register("qa", Evaluator(
    enabled=lambda config: bool(config.train.qa_questions),
    run=lambda ctx: question_answering(ctx.run, ctx.params, ctx.config.train.qa_questions)))
