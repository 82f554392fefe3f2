"""The loop finds what runs around training through registries: a model hook, a pre-training hook
and an evaluator registered here for one test (enabled only for this file's marker seed) run in a real
training run."""
import contextlib
import dataclasses
import os

import jax
import numpy as np
import pytest

from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.hooks import MODEL_HOOKS, PREPARE_HOOKS, EvalContext, RunContext

MARK = 4242  # config.seed that switches this file's hooks on; every other run leaves them idle
calls = []


def _model(config, cfg):
    if config.seed == MARK:
        calls.append(("model", cfg.d_model))
    return cfg


def _prepare(ctx: RunContext):
    if ctx.config.seed == MARK:
        calls.append(("prepare", ctx))
    return ctx.run


def _evaluate(ctx: EvalContext) -> dict:
    calls.append(("evaluate", ctx))
    return {"test/batches": len(ctx.eval_batches), "test/param_sum": float(sum(
        np.asarray(x, np.float64).sum() for x in jax.tree_util.tree_leaves(ctx.params)))}


@pytest.fixture
def registered():
    """The two hooks and the evaluator, registered (last, after every plugin's) for one test."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(MODEL_HOOKS.override("test_hooks_model", _model))
        stack.enter_context(PREPARE_HOOKS.override("test_hooks_prepare", _prepare))
        stack.enter_context(EVALUATORS.override("test_hooks", Evaluator(
            enabled=lambda config: config.seed == MARK, run=_evaluate)))
        yield


def test_registered_hooks_and_evaluator_run_in_the_loop(registered, tiny_config, tmp_path):
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.loop import train_and_evaluate
    calls.clear()
    wd = str(tmp_path / "run")
    result = train_and_evaluate(tiny_config(**{"train.steps": 3, "seed": MARK}), wd)
    kinds = [c[0] for c in calls]
    assert kinds[0] == "model" and kinds[-2:] == ["prepare", "evaluate"] and kinds.count("evaluate") == 1
    assert calls[0][1] == 64  # tiny_overrides' d_model
    ctx = calls[-1][1]
    assert isinstance(ctx, EvalContext) and ctx.workdir == wd and ctx.lead and ctx.config.seed == MARK
    assert result["test/batches"] == 2 == len(ctx.eval_batches)  # the loop's validation batches (train.eval_batches)
    trained = restore_params(wd)[0]
    total = float(sum(np.asarray(x, np.float64).sum() for x in jax.tree_util.tree_leaves(trained)))
    assert result["test/param_sum"] == total
    assert list(result)[-2:] == ["test/batches", "test/param_sum"]  # after the loop's own metrics
    assert dataclasses.replace(ctx, workdir="x").output("a.json") == os.path.join("x", "a.json")
    assert dataclasses.replace(ctx, lead=False).output("a.json") is None
    calls.clear()
    other = train_and_evaluate(tiny_config(**{"train.steps": 3}), str(tmp_path / "other"))
    assert not calls and "test/batches" not in other


def test_hooks_registered_for_a_test_are_gone_after_it(tiny_config, tmp_path):
    """Without the fixture the marker run calls none of them: nothing of the test above is left registered."""
    from edge_jax.train.loop import train_and_evaluate
    assert "test_hooks" not in EVALUATORS and "test_hooks_model" not in MODEL_HOOKS
    calls.clear()
    result = train_and_evaluate(tiny_config(**{"train.steps": 3, "seed": MARK}), str(tmp_path / "run"))
    assert not calls and "test/batches" not in result and "val_loss" in result


def test_evaluators_run_in_registration_order_core_first():
    names = EVALUATORS.names()
    assert names[0] == "qa"
    papers = [n for n in names if n in ("longctx", "moe", "sparsity")]
    assert papers == ["longctx", "moe", "sparsity"]
