"""``edge-jax eval``: validation loss and perplexity of the latest checkpoint in a workdir."""
from __future__ import annotations

import os
import sys

import jax

from edge_jax.sharding import batch_sharding
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.loop import evaluate, model_eval_batches
from edge_jax.train.qa import question_answering
from edge_jax.train.setup import build, check_tokenizer
from edge_jax.train.state import abstract_train_state
from edge_jax.train.step import make_eval_step
from edge_jax.train.workdir import load_workdir_config


def restore_latest(workdir: str, devices=None):
    """``(run_setup, state, step)`` for the newest readable checkpoint in ``workdir``; ``state`` holds its params
    (its ``opt_state`` is None: evaluating needs none, and the optimizer that wrote it may differ)."""
    run = build(load_workdir_config(workdir), devices)
    check_tokenizer(workdir, run.tokenizer, run.config)
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), run.config.train.keep_ckpts, 1)
    abstract, _ = abstract_train_state(run.model, run.tx, run.mesh)
    try:   # the newest readable step (a damaged newer one is named on stderr and left in place)
        found = ckpt.restore_newest(lambda step: ckpt.restore_params(step, abstract.params), move=False,
                                    warn=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        ckpt.close()
    if found is None:
        raise FileNotFoundError(f"no checkpoint in {workdir}/checkpoints; train first with `edge-jax train`")
    step, params = found
    return run, abstract.replace(params=params, opt_state=None, step=step), step


def evaluate_workdir(workdir: str, num_batches: int = 0, split: str = "validation",
                     qa: bool = False, max_questions: int = 0) -> dict:
    """Validation loss/perplexity; with ``qa``, also exact match on the dataset's question split."""
    run, state, step = restore_latest(workdir)
    sharding = batch_sharding(run.mesh)
    eval_step = jax.jit(make_eval_step(run.model.apply))
    batches = model_eval_batches(run, split, num_batches)
    out = dict(evaluate(eval_step, state.params, batches, sharding), step=step, batches=len(batches))
    if qa:
        out.update(question_answering(run, state.params, max_questions or -1))
    return out
