"""``eval.*``: zero-shot tasks after training, and the scorer for a model and its params.

``eval.zero_shot`` names tasks or groups (``builtin``: facts_mc, code_cloze, longctx_mc;
``ten_benchmarks``: ten published benchmarks, which read ``eval.data_dir``); after training, the ``zero_shot``
evaluator scores them, writes ``<workdir>/eval/<task>.json`` and adds ``zero_shot/<task>`` (acc) and
``zero_shot_avg`` to the run's result, so grid tables can show them. The same code serves
``edge-jax eval --tasks`` (:mod:`edge_jax.train.evaluate`).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os

from edge_jax.errors import ConfigError
from edge_jax.eval import benchmarks, builtin  # noqa: F401  (register the tasks)
from edge_jax.eval.files import split_files
from edge_jax.eval.scorer import Scorer
from edge_jax.eval.suite import run_tasks, source_for, task_examples
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, BuiltinSource, TaskError, expand
from edge_jax.models.inputs import host_inputs
from edge_jax.registry import EVALUATORS, SECTIONS, Evaluator, Section
from edge_jax.train.hooks import PREPARE_HOOKS, EvalContext, RunContext


@dataclasses.dataclass(frozen=True)
class EvalKeys:
    """``eval.*``: ``zero_shot`` task names or groups, comma-separated ("" = off); ``data_dir``: where
    file-backed tasks' published files lie (``tfds:<dir>`` for prepared TFDS datasets); ``num_fewshot``
    shots per document; ``limit``: the first N documents per task (0 = all); ``max_length``: the longest
    input in tokens (0 = data.seq_len); ``batch_size``: rows per scoring batch (rounded up to a multiple
    of the mesh's data x fsdp devices)."""
    zero_shot: str = ""
    data_dir: str = ""
    num_fewshot: int = 0
    limit: int = 0
    max_length: int = 0
    batch_size: int = 16


def check_tasks(names: str, data_dir: str, num_fewshot: int = 0, files: bool = True) -> list[str]:
    """The expanded task names; a TaskError for a task that cannot run few-shot or, with ``files``,
    a file-backed task with no data dir or no evaluation split there."""
    tasks = expand(names)
    for name in tasks:
        task = ZERO_SHOT_TASKS.get(name)
        if num_fewshot and task.fewshot_split is None:
            raise TaskError(f"{name} has no split to draw few-shot examples from; use num_fewshot 0 or drop {name}")
        if task.builtin or not files:
            continue
        source_for(task, data_dir, None)  # a data dir is given
        if not data_dir.startswith(benchmarks.TFDS_PREFIX):
            task_dir = os.path.join(os.path.expanduser(data_dir), name)
            if not split_files(task_dir, task.eval_split):
                raise TaskError(f"{name}: no '{task.eval_split}' split at {task_dir}; put its published "
                                f"{task.eval_split}.jsonl or {task.eval_split}.parquet there (docs/eval.md)")
    return tasks


def _validate(c) -> None:
    e = c.eval
    for key in ("num_fewshot", "limit", "max_length"):
        if e[key] < 0:
            raise ConfigError(f"eval.{key}={e[key]} must be >= 0")
    if e.batch_size <= 0:
        raise ConfigError(f"eval.batch_size={e.batch_size} must be positive")
    if e.zero_shot:  # names only: the files are checked before training (a compile needs none)
        try:
            check_tasks(e.zero_shot, e.data_dir, e.num_fewshot, files=False)
        except TaskError as err:
            raise ConfigError(f"eval.zero_shot: {err}") from None


SECTIONS.register("eval", Section("eval", EvalKeys, _validate,
                                  resumable=tuple(f"eval.{f.name}" for f in dataclasses.fields(EvalKeys))))


@PREPARE_HOOKS.register("zero_shot_data")
def check_data(ctx: RunContext):
    """Before the first step: every file-backed task named in ``eval.zero_shot`` has its files and every
    record in them is valid (edge_jax.eval.validate), so a missing data dir or a bad label fails now
    rather than after training."""
    e = ctx.config.eval
    if e.zero_shot:
        try:
            names = check_tasks(e.zero_shot, e.data_dir, e.num_fewshot)
        except TaskError as err:
            raise ConfigError(f"eval.zero_shot: {err}") from None
        for name in names:
            task = ZERO_SHOT_TASKS.get(name)
            if not task.builtin:
                task_examples(task, source_for(task, e.data_dir, None), e.num_fewshot, e.limit)
    return ctx.run


def make_scorer(model, params, tokenizer, max_length: int, batch_size: int = 16, mesh=None,
                progress: bool = True, truncate: bool = True) -> Scorer:
    """A :class:`Scorer` for ``model`` (its memory kind's host inputs included); the batch
    size is rounded up to a multiple of the mesh's data x fsdp devices."""
    if mesh is not None:
        ways = mesh.shape["data"] * mesh.shape["fsdp"]
        batch_size = -(-batch_size // ways) * ways
    return Scorer(model.apply, params, tokenizer, max_length, batch_size,
                  host_fn=functools.partial(host_inputs, model.cfg), mesh=mesh, truncate=truncate, progress=progress)


def zero_shot(ctx: EvalContext) -> dict:
    """The ``zero_shot`` evaluator: ``eval.zero_shot`` on the trained params."""
    c = ctx.config
    max_length = c.eval.max_length or c.data.seq_len
    scorer = make_scorer(ctx.run.model, ctx.params, ctx.run.tokenizer, max_length, c.eval.batch_size,
                         ctx.run.mesh, progress=False)
    return run_tasks(scorer, c.eval.zero_shot, data_dir=c.eval.data_dir,
                     builtin=BuiltinSource(c.data, ctx.run.tokenizer, max_length), num_fewshot=c.eval.num_fewshot,
                     limit=c.eval.limit, out_dir=ctx.output("eval"), log=logging.getLogger(__name__).info)


EVALUATORS.register("zero_shot", Evaluator(enabled=lambda config: bool(config.eval.zero_shot), run=zero_shot))
