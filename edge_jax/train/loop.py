"""The training loop: resume, train with jitted steps, log, evaluate, checkpoint."""
from __future__ import annotations

import json
import math
import os
import time
from functools import partial

import jax
import numpy as np

from edge_jax.utils.atomic import write_json_atomic
from edge_jax.config import base_config, flatten, moe_needs_calibration
from edge_jax.data import load_qa, make_eval_batches, make_train_iter
from edge_jax.models.generate import answer_nll, exact_match
from edge_jax.models.inputs import host_inputs, with_host_inputs
from edge_jax.sharding import batch_sharding, maybe_initialize_distributed
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.init_from import merge_params, restore_params
from edge_jax.train.metrics import MetricsWriter, read_jsonl
from edge_jax.train.optim import trained_count
from edge_jax.train.setup import build, check_tokenizer
from edge_jax.train.state import abstract_train_state, create_train_state
from edge_jax.train.step import make_eval_step, make_train_step


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss); the message says where and what to do."""


def to_global(batch: dict, sharding) -> dict:
    """Process-local numpy batch -> global jax arrays laid out on the mesh."""
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in batch.items()}


def process_rows(batch: dict) -> dict:
    """This process's share of the rows of a global host batch."""
    n, i = jax.process_count(), jax.process_index()
    return {k: v[i * (len(v) // n):(i + 1) * (len(v) // n)] for k, v in batch.items()}


def evaluate(eval_step, params, batches, sharding) -> dict:
    """Token-weighted validation loss over global eval batches."""
    loss_sum, tokens = 0.0, 0.0
    for batch in batches:
        out = eval_step(params, to_global(process_rows(batch), sharding))
        loss_sum += float(out["loss_sum"])
        tokens += float(out["tokens"])
    loss = loss_sum / max(tokens, 1.0)
    return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}


RESUMABLE_CHANGES = ("train.steps", "train.log_every", "train.eval_every", "train.eval_batches",
                     "train.ckpt_every", "train.keep_ckpts", "train.qa_questions", "train.sparsity_batches",
                     "data.data_dir", "mesh.data", "mesh.fsdp", "mesh.tensor",
                     "longctx.method", "longctx.lengths", "longctx.examples", "longctx.tasks",
                     "moe.calib_batches", "moe.time_batches")


def save_config(config, workdir: str) -> None:
    """Write config.json; refuse to resume a workdir trained with an incompatible config."""
    path = os.path.join(workdir, "config.json")
    if os.path.exists(os.path.join(workdir, "checkpoints")) and os.path.exists(path):
        with open(path) as f:
            old = flatten(json.load(f))
        new = flatten(json.loads(json.dumps(config.to_dict())))  # tuples read back as lists
        # keys added to the schema after that run count as their defaults
        old = {**flatten(json.loads(json.dumps(base_config().to_dict()))), **old}
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in RESUMABLE_CHANGES)
        if changed:
            raise TrainingError(f"workdir {workdir} holds a run with different {', '.join(changed[:4])}"
                                f"{' ...' if len(changed) > 4 else ''}; use a new --workdir or the same config")
    write_json_atomic(path, config.to_dict())


def train_and_evaluate(config, workdir: str, devices=None) -> dict:
    """Train (resuming from ``workdir`` if it holds a checkpoint), evaluate, return final metrics."""
    maybe_initialize_distributed()
    os.makedirs(workdir, exist_ok=True)
    run = build(config, devices)
    cfg, t = run.config, run.config.train
    lead = jax.process_index() == 0
    if lead:
        save_config(cfg, workdir)
        check_tokenizer(workdir, run.tokenizer, cfg, write=True)
    abstract, shardings = abstract_train_state(run.model, run.tx, run.mesh)
    data_sharding = batch_sharding(run.mesh)
    train_iter = make_train_iter(cfg.data, run.tokenizer, cfg.seed, jax.process_index(), jax.process_count())
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), t.keep_ckpts, t.ckpt_every)
    start = ckpt.latest_step() or 0
    if start:
        state, data_state = ckpt.restore(start, abstract)
        train_iter.set_state(data_state)
    else:
        state = create_train_state(run.model, run.tx, run.mesh, cfg.seed)[0]
        if cfg.init_from:
            state = state.replace(params=params_from(cfg.init_from, state.params, run.tokenizer, cfg))
    if moe_needs_calibration(cfg) and not run.model.cfg.moe_exec.plans:  # steps=0 (config validation)
        from edge_jax.papers.npumoe.evaluate import calibrate_run
        run = calibrate_run(run, state.params, workdir if lead else None)[0]
    trained, total = trained_count(state.params, t.trainable)
    if lead:
        print(f"training {trained:,} of {total:,} weights ({100 * trained / total:.2f}%"
              f"{'; EdgeInfinite trains 0.15%' if t.trainable == 'memory_gate' else ''})", flush=True)
    train_step = jax.jit(make_train_step(t.grad_accum, run.schedule), donate_argnums=0,
                         in_shardings=(shardings, data_sharding), out_shardings=(shardings, None))
    eval_step = jax.jit(make_eval_step(run.model.apply), in_shardings=(shardings.params, data_sharding))
    eval_batches = model_eval_batches(run, "validation", t.eval_batches)
    writer = MetricsWriter(workdir, t.steps, start, enabled=lead)
    tokens_per_step = cfg.data.batch_size * cfg.data.seq_len
    timed_steps, timed_s, last, final, result = 0, 0.0, {}, None, {}
    try:
        for step in range(start + 1, t.steps + 1):
            t0 = time.perf_counter()
            batch = with_host_inputs(run.model.cfg, next(train_iter))
            state, metrics = train_step(state, to_global(batch, data_sharding))
            metrics = {k: float(v) for k, v in metrics.items()}
            dt = time.perf_counter() - t0
            if step > start + 1:  # the first step includes compilation
                timed_steps, timed_s = timed_steps + 1, timed_s + dt
            if not (math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])):
                ckpt.wait()
                good = ckpt.latest_step()
                raise TrainingError(
                    f"non-finite loss/grad norm ({metrics['loss']}, {metrics['grad_norm']}) at step {step}; "
                    f"last good checkpoint is step {good}; lower train.lr or raise train.warmup_steps and rerun")
            metrics["step_time_s"] = dt
            metrics["tokens_per_s"] = tokens_per_step / dt
            last = metrics
            if step % t.log_every == 0 or step == t.steps:
                writer.write(step, "train", metrics)
            writer.progress(step, {"loss": metrics["loss"], "lr": metrics["lr"]})
            if step % t.eval_every == 0 or step == t.steps:
                final = evaluate(eval_step, state.params, eval_batches, data_sharding)
                writer.write(step, "eval", final)
            if step % t.ckpt_every == 0 or step == t.steps:
                ckpt.save(step, state, train_iter.get_state(), force=step == t.steps)
        ckpt.wait()
        if final is None:  # nothing left to train: the run had already finished
            final = evaluate(eval_step, state.params, eval_batches, data_sharding)
            last = _last_train_record(workdir)
        result = dict(final, train_loss=last.get("loss", float("nan")), steps=t.steps,
                      tokens_per_s=tokens_per_step * timed_steps / timed_s if timed_s else float("nan"),
                      step_time_s=timed_s / timed_steps if timed_steps else float("nan"))
        if t.qa_questions:
            result.update(question_answering(run, state.params, t.qa_questions))
        result.update(trained_params=trained, trained_fraction=trained / total)
        if cfg.longctx.method:
            from edge_jax.papers.edgeinfinite.longctx_eval import evaluate_longctx
            result.update(evaluate_longctx(run.model, state.params, run.tokenizer, cfg))
        if run.model.cfg.moe_experts:
            from edge_jax.papers.npumoe.evaluate import moe_metrics
            result.update(moe_metrics(run, state.params, eval_batches, cfg.moe.time_batches))
        if t.sparsity_batches:
            result.update(activation_sparsity(run, state.params, eval_batches[:t.sparsity_batches], workdir, lead))
    finally:
        writer.close()
        ckpt.close()
    if lead:
        write_json_atomic(os.path.join(workdir, "final_metrics.json"), result)
    return result


def params_from(workdir: str, params, tokenizer, config):
    """``params`` with every param of ``workdir``'s latest checkpoint copied in (see init_from); the
    tokenizer must be the one that run was trained with."""
    check_tokenizer(workdir, tokenizer, config)
    return merge_params(params, restore_params(workdir)[0], workdir)


def model_eval_batches(run, split: str, num_batches: int) -> list[dict]:
    """The split's eval batches with the model's host inputs (Engram n-gram ids) added."""
    return [with_host_inputs(run.model.cfg, b)
            for b in make_eval_batches(run.config.data, run.tokenizer, split, num_batches)]


def question_answering(run, params, limit: int) -> dict:
    """Greedy exact match and gold-answer NLL on the first ``limit`` questions (all when -1)."""
    questions = load_qa(run.config.data, run.config.data.data_dir)
    questions = questions if limit < 0 else questions[:limit]
    host_fn = partial(host_inputs, run.model.cfg)
    return {**exact_match(run.model.apply, params, run.tokenizer, questions, host_fn=host_fn),
            **answer_nll(run.model.apply, params, run.tokenizer, questions, host_fn=host_fn)}


def activation_sparsity(run, params, batches, workdir: str, write: bool) -> dict:
    """PLM Algorithm 1 on ``batches``: scalar metrics; the whole sweep goes to ``workdir/sparsity.json``."""
    from edge_jax.papers.plm.sparsity import sparsity_metrics
    scalars, sweep = sparsity_metrics(run.model, params, batches)
    if write:
        write_json_atomic(os.path.join(workdir, "sparsity.json"), sweep)
    return scalars


def _last_train_record(workdir: str) -> dict:
    train = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if r.get("kind") == "train"]
    return train[-1] if train else {}


def load_workdir_config(workdir: str):
    import ml_collections
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found; is {workdir!r} a training workdir? run `edge-jax train` first")
    with open(path) as f:
        return ml_collections.ConfigDict(json.load(f))
