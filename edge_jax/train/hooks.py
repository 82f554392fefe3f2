"""What a run lets other code do to it: change the model it builds, prepare before training, and
evaluate after training, each chosen by the config and found through a registry.

- :data:`MODEL_HOOKS`: ``hook(config, model_cfg) -> model_cfg``, applied in registration order by
  :func:`edge_jax.train.setup.model_config` (e.g. attaching an execution plan the config asks for).
- :data:`PREPARE_HOOKS`: ``hook(ctx: RunContext) -> run``, called in registration order once the
  params are in place and before the first step; each returns the run to go on with (``ctx.run``
  when it has nothing to do, a rebuilt one otherwise, e.g. a model re-planned on calibrated loads).
- :data:`edge_jax.registry.EVALUATORS`: after training, every evaluator whose ``enabled(config)`` is
  true runs on an :class:`EvalContext`, in registration order, and its metrics join the result.

The built-in ``qa`` evaluator (:mod:`edge_jax.train.qa`) registers when this module is imported, so
it comes before the papers' evaluators, which import this module for :class:`EvalContext`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from edge_jax.registry import EVALUATORS, Registry
from edge_jax.train import qa  # noqa: F401  (registers the built-in evaluator before any paper's)


@dataclasses.dataclass(frozen=True)
class RunContext:
    """A run whose params are in place: ``run`` (:class:`edge_jax.train.setup.RunSetup`: config,
    tokenizer, mesh, model, optimizer), ``params``, its ``workdir``, and ``lead``, whether this
    process writes files (process 0 of a multi-host run)."""
    run: Any
    params: Any
    workdir: str
    lead: bool

    @property
    def config(self):
        """The run's resolved config (``model.vocab_size`` set)."""
        return self.run.config

    def output(self, name: str) -> str | None:
        """``workdir/name`` where this process writes files, None on the other processes."""
        return os.path.join(self.workdir, name) if self.lead else None


@dataclasses.dataclass(frozen=True)
class EvalContext(RunContext):
    """What an evaluator gets after training: a :class:`RunContext` with the trained params and
    ``eval_batches``, the validation batches the loop evaluated on (host inputs included)."""
    eval_batches: list = dataclasses.field(default_factory=list)


MODEL_HOOKS: Registry[Callable[[Any, Any], Any]] = Registry("model hook")
PREPARE_HOOKS: Registry[Callable[[RunContext], Any]] = Registry("pre-training hook")


def prepare(ctx: RunContext):
    """The run after every :data:`PREPARE_HOOKS` entry had its turn."""
    for _, hook in PREPARE_HOOKS.items():
        ctx = dataclasses.replace(ctx, run=hook(ctx))
    return ctx.run


def run_evaluators(ctx: EvalContext) -> dict:
    """The merged metrics of every registered evaluator that ``ctx.config`` enables, in order."""
    out: dict = {}
    for _, evaluator in EVALUATORS.items():
        if evaluator.enabled(ctx.config):
            out.update(evaluator.run(ctx))
    return out
