"""The training loop: resume, train with jitted steps, log, evaluate, checkpoint; then the evaluators.

What happens around training is chosen by the config through registries
(:mod:`edge_jax.train.hooks`): model hooks shape the model, pre-training hooks prepare the run once
its params are in place, and after training every enabled evaluator adds its metrics.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys

import jax
import jax.numpy as jnp

from edge_jax import distributed
from edge_jax.config import flat_json, schema_defaults
from edge_jax.data import make_eval_batches, make_train_iter
from edge_jax.errors import Interrupted, Preempted, UserError
from edge_jax.models.inputs import with_host_inputs
from edge_jax.registry import RUNNERS, SECTIONS
from edge_jax.sharding import batch_sharding, on_mesh, process_block, process_rows, to_global
from edge_jax.train import divergence
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.feed import DeviceFeed
from edge_jax.train.flops import StepFlops
from edge_jax.train.hooks import EvalContext, RunContext, prepare, run_evaluators
from edge_jax.train.init_from import merge_params, restore_params
from edge_jax.train.metrics import MetricsWriter, read_jsonl
from edge_jax.train.optim import ALL, group_names, rename_groups, trained_count
from edge_jax.train.preemption import PreemptionWatch
from edge_jax.train.readback import READ_LAG, Readback, StepClock, finite, steady
from edge_jax.train.setup import build, check_tokenizer
from edge_jax.train.state import abstract_train_state, create_train_state
from edge_jax.train.step import jit_train_step, make_eval_step
from edge_jax.train.telemetry import StepProfiler, profile_dir, record_memory
from edge_jax.train.workdir import imported_from, read_saved_config
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.storage import ensure_usable, epath


class TrainingError(UserError, RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); the message says where and what to do."""


def evaluate(eval_step, params, batches, sharding) -> dict:
    """Token-weighted validation loss over global eval batches, summed on the devices and read once."""
    sums = None
    for batch in batches:
        out = eval_step(params, to_global(process_rows(batch, sharding), sharding))
        sums = out if sums is None else jax.tree_util.tree_map(jnp.add, sums, out)
    totals = {"loss_sum": 0.0, "tokens": 0.0} if sums is None else jax.device_get(sums)
    loss = float(totals["loss_sum"]) / max(float(totals["tokens"]), 1.0)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}


# Keys a run may change when it resumes a workdir (how long to train, what to log and evaluate,
# where the data lies, the mesh); the config sections of the papers add theirs (Section.resumable).
RESUMABLE_CHANGES = ("train.steps", "train.log_every", "train.eval_every", "train.eval_batches",
                     "train.ckpt_every", "train.keep_ckpts", "train.qa_questions", "train.profile_start",
                     "train.profile_steps",
                     "data.data_dir", "data.workers", "data.tokens_dir", "mesh.data", "mesh.fsdp", "mesh.tensor")


def resumable_changes() -> frozenset:
    """:data:`RESUMABLE_CHANGES` and every registered config section's ``resumable`` keys."""
    return frozenset(RESUMABLE_CHANGES).union(*(s.resumable for _, s in SECTIONS.items()))


def save_config(config, workdir: str) -> None:
    """Write config.json; refuse to resume a workdir trained with an incompatible config."""
    path = os.path.join(workdir, "config.json")
    if epath(os.path.join(workdir, "checkpoints")).exists() and epath(path).exists():
        old = flat_json(read_saved_config(path))  # in today's keys
        new = flat_json(config)
        # keys added to the schema after that run count as their defaults
        old = {**flat_json(schema_defaults(config)), **old}
        resumable = resumable_changes()
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in resumable)
        if changed:
            raise TrainingError(f"workdir {workdir} holds a run with different {', '.join(changed[:4])}"
                                f"{' ...' if len(changed) > 4 else ''}; use a new --workdir or the same config")
    write_json_atomic(path, config.to_dict())


def train_and_evaluate(config, workdir: str, devices=None) -> dict:
    """Train (resuming from ``workdir`` if it holds a checkpoint), evaluate, return final metrics."""
    distributed.start()
    ensure_usable(workdir)  # a missing bucket or a refused account: one line now, not at the first checkpoint
    source = imported_from(workdir)
    if source:
        raise TrainingError(f"{workdir} holds the HF checkpoint imported from {source}, a base to start from; "
                            f"train from it into a new workdir: --config configs/hf.py:base={workdir} --workdir NEW")
    epath(workdir).mkdir(parents=True, exist_ok=True)
    run = build(config, devices)
    cfg, t = run.config, run.config.train
    lead = distributed.is_lead()
    distributed.on_lead("workdir", lambda: _claim(cfg, workdir, run.tokenizer))
    abstract, shardings = abstract_train_state(run.model, run.tx, run.mesh)
    data_sharding = batch_sharding(run.mesh)
    train_iter = make_train_iter(cfg.data, run.tokenizer, cfg.seed, *process_block(data_sharding, cfg.data.batch_size))
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), t.keep_ckpts, t.ckpt_every)
    resumed = ckpt.restore_newest(lambda step: _resume(ckpt, step, abstract, workdir, t.steps), move=lead,
                                  warn=lambda line: print(line, file=sys.stderr, flush=True))
    start = resumed[0] if resumed else 0
    losses = divergence.LossWatch(ckpt.metrics(start).get("min_loss", math.inf) if resumed else math.inf)
    if resumed:
        state, data_state = resumed[1]
        if data_state is not None:
            train_iter.set_state(data_state)
    else:
        state = create_train_state(run.model, run.tx, run.mesh, cfg.seed)[0]
        if cfg.init_from:
            state = state.replace(params=params_from(cfg.init_from, state.params, run.tokenizer, cfg, cfg.init_step))
    run = prepare(RunContext(run, state.params, workdir, lead))
    trained, total = trained_count(state.params, t.trainable)
    if t.steps and not trained:
        raise TrainingError(f"train.trainable={t.trainable!r} matches no param, so nothing would train; match "
                            "param paths like layers_0/attn/q_proj/kernel, or use '.*' for every param")
    if lead:
        print(f"training {trained:,} of {total:,} weights ({100 * trained / total:.2f}%"
              f"{'' if t.trainable == ALL else f'; train.trainable={t.trainable!r}'})", flush=True)
    train_jit = jit_train_step(t, run.schedule, shardings, data_sharding)
    eval_step = on_mesh(run.mesh, jax.jit(make_eval_step(run.model.apply),
                                          in_shardings=(shardings.params, data_sharding)))
    eval_batches = model_eval_batches(run, "validation", t.eval_batches)
    feed = DeviceFeed(train_iter, lambda b: to_global(with_host_inputs(run.model.cfg, b), data_sharding))
    writer = MetricsWriter(workdir, t.steps, start, enabled=lead)
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len
    clock, readback, last, final, result = StepClock(), Readback(), {}, None, {}
    flops = StepFlops(run.model.cfg, cfg, run.mesh.size, run.mesh.devices.flat[0].device_kind)
    try:
        # compiled once, ahead of the first step: the executable every step runs
        train_step = on_mesh(run.mesh, train_jit.lower)(state, feed.peek()).compile() if start < t.steps else None
        if train_step is not None:
            record_memory(train_step, workdir)
        distributed.barrier("train")  # every process ready: the first step's collectives meet within seconds
        with PreemptionWatch() as watch, StepProfiler(profile_dir(workdir), t.profile_start, t.profile_steps,
                                                      t.steps) as profiler:
            for step in range(start + 1, t.steps + 1):
                with profiler.step(step), steady():  # nothing is read back from the devices here
                    state, metrics = train_step(state, next(feed))
                    clock.dispatched(step)
                    readback.add(step, metrics)
                    feed.fill()  # the next batches go to the devices while this step runs
                profiler.step_done(step, state)
                periodic = step % t.ckpt_every == 0 or step == t.steps
                evaluating = step % t.eval_every == 0 or step == t.steps
                stop = watch.reached(step)  # SIGTERM or Ctrl-C: every process saves this step and stops
                if periodic or evaluating or stop:
                    through = step  # what uses the state needs this step's loss first
                elif step - READ_LAG > start and (step - READ_LAG) % t.log_every == 0:
                    through = step - READ_LAG  # a log step is read while the steps after it run
                else:
                    through = start  # nothing to read yet
                records = readback.read(through)
                if records:
                    clock.read(records[-1][0])
                for done, metrics in records:
                    if not finite(metrics):
                        ckpt.wait()
                        raise TrainingError(divergence.message(ckpt, workdir, done, metrics["loss"],
                                                               metrics["grad_norm"], t.lr))
                    saved, last = losses.update(metrics["loss"]), metrics
                    if done % t.log_every == 0 or done == t.steps:
                        window = clock.window()
                        writer.write(done, "train", {**metrics, **pace(window, tokens_per_step),
                                                     **flops.metrics(window)})
                writer.progress(step, {"loss": last["loss"], "lr": last["lr"]} if last else {})
                if evaluating:
                    with clock.paused():
                        final = evaluate(eval_step, state.params, eval_batches, data_sharding)
                    writer.write(step, "eval", final)
                if periodic or stop:
                    with clock.paused():
                        writer.flush()  # the metrics of the steps this checkpoint keeps are readable first
                        ckpt.save(step, state, feed.data_state(), force=step == t.steps or stop, metrics=saved)
                if stop:
                    ckpt.wait()
                    stopped = Interrupted if watch.interrupted else Preempted
                    raise stopped(f"stopped by {'Ctrl-C' if watch.interrupted else 'SIGTERM'} after step {step} of "
                                  f"{t.steps}; its checkpoint is in {ckpt.directory}: rerun the same command to resume")
        ckpt.wait()
        if final is None:  # nothing left to train: the run had already finished
            final = evaluate(eval_step, state.params, eval_batches, data_sharding)
            last = _last_train_record(workdir)
        steady_s = clock.steady()
        result = dict(final, train_loss=last.get("loss", float("nan")), steps=t.steps,
                      tokens_per_s=tokens_per_step / steady_s if steady_s else float("nan"),
                      step_time_s=steady_s or float("nan"),
                      trained_params=trained, trained_fraction=trained / total)
        result.update(run_evaluators(EvalContext(run, state.params, workdir, lead, eval_batches)))
    finally:
        writer.close()
        ckpt.close()
        train_iter.close()  # a stream's grain worker processes
    if lead:
        write_json_atomic(os.path.join(workdir, "final_metrics.json"), result)
    return result


def pace(step_time_s: float | None, tokens_per_step: int) -> dict:
    """The timing metrics of a log record: mean seconds per step over its window, tokens per second."""
    if not step_time_s:
        return {}
    return {"step_time_s": step_time_s, "tokens_per_s": tokens_per_step / step_time_s}


RUNNERS.register("lm", train_and_evaluate)


def _claim(config, workdir: str, tokenizer) -> None:
    """Refuse a workdir that holds another run; record the config and the tokenizer of this one."""
    save_config(config, workdir)
    check_tokenizer(workdir, tokenizer, config, write=True)


def _resume(ckpt, step: int, abstract, workdir: str, steps: int):
    """(train state, data-iterator state) at ``step``; a finished run (``step >= steps``) needs only
    the params to evaluate, whichever optimizer wrote them, and no data state."""
    if step >= steps:
        return abstract.replace(params=ckpt.restore_params(step, abstract.params), opt_state=None, step=step), None
    return _restore(ckpt, step, abstract, workdir)


def _restore(ckpt, step: int, abstract, workdir: str):
    try:
        return ckpt.restore(step, abstract)
    except ValueError as e:
        if "structures do not match" not in str(e):
            raise
    # Older edge_jax versions labelled a multiplier group by name ("gate" where it is now "lr0"): one
    # label on each side that the other lacks is that group, renamed; any other difference still fails.
    saved, want = ckpt.saved_groups(step), group_names(abstract.opt_state)
    if len(saved - want) == 1 and len(want - saved) == 1:
        (old,), (new,) = saved - want, want - saved
        with contextlib.suppress(ValueError):
            state, data = ckpt.restore(step, abstract.replace(opt_state=rename_groups(abstract.opt_state, {new: old})))
            return state.replace(opt_state=rename_groups(state.opt_state, {old: new})), data
    raise TrainingError(f"checkpoint step {step} in {workdir} holds a train state of another layout (another "
                        "model, or optimizer groups from other train.trainable / train.lr_multipliers or an "
                        "older edge_jax); resume it with the config and commit that wrote it, or use a new --workdir")


def params_from(workdir: str, params, tokenizer, config, step: int = 0):
    """``params`` with every param of ``workdir``'s latest checkpoint (or its checkpoint at ``step`` > 0)
    copied in (see init_from); the tokenizer must be the one that run was trained with."""
    check_tokenizer(workdir, tokenizer, config)
    return merge_params(params, restore_params(workdir, step)[0], workdir, config.train.trainable)


def model_eval_batches(run, split: str, num_batches: int) -> list[dict]:
    """The split's eval batches with the model's host inputs (:mod:`edge_jax.models.inputs`) added."""
    return [with_host_inputs(run.model.cfg, b)
            for b in make_eval_batches(run.config.data, run.tokenizer, split, num_batches)]


def _last_train_record(workdir: str) -> dict:
    train = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r.get("kind") == "train"]
    return train[-1] if train else {}

