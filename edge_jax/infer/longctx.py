"""The long-context harness: exact match on the built-in ``longctx`` tasks with one KV method.

``longctx.method`` names a :data:`edge_jax.infer.kv_baselines.KV_METHODS` entry (a generic
baseline, or a paper's own method); its keys are the ``longctx`` section
(:mod:`edge_jax.infer.longctx_config`). The five tasks stand for LongBench's categories
(:data:`edge_jax.data.builders.longctx_tasks.CATEGORIES`): single-needle retrieval, multi-key
retrieval, aggregation over documents, few-shot pattern continuation and code-like variable
tracking. ``longctx.examples`` prompts per task and length (``longctx.lengths``, in characters:
tokens for the byte tokenizer) are drawn with the run's seed; each is prefilled with the method's
cache policy and answered greedily (at most ``longctx.answer_tokens`` tokens, up to the first
newline), then compared with the gold answer.

Metrics (percent, like LongBench): ``longctx/overall`` (mean over tasks and lengths),
``longctx/<category>`` (mean over lengths), ``longctx/len<L>`` (mean over tasks), and
``longctx/<category>/len<L>``; ``longctx/peak_cache_tokens`` is the most tokens any layer cached.
``longctx/answer_nll`` (and per category) is the teacher-forced NLL of the gold answer, nats per
token: a graded score that still separates methods when a tiny model's exact match is zero.
``longctx.near_lengths`` (optional) is a second band scored apart: ``longctx/near/overall``,
``longctx/near/<category>``, ``longctx/near/answer_nll`` (and per category) over its lengths alone,
while ``longctx/overall`` and the rest stay over ``longctx.lengths``; the per-length metrics
(``longctx/len<L>``, ``longctx/<category>/len<L>``) cover the lengths of both.

The in-window check (:func:`evaluate_inwindow`, ``longctx.inwindow_examples`` > 0, run after a base
LM trains): passkey and multikey prompts of ``longctx.inwindow_lengths`` (inside its training
window) answered greedily with the model's own full attention; ``inwindow/single_needle``,
``inwindow/multi_key`` (percent exact match, mean over lengths), ``inwindow/<category>/len<L>``,
``inwindow/answer_nll/<category>``. Every long-context evaluation carries its base's numbers as
``base/inwindow/...`` (:func:`base_inwindow`, found through ``init_from``), so a table's records say
whether the base could retrieve at all.

Both register as evaluators (``longctx``, ``inwindow``); :func:`method_cells` builds a comparison
grid's cells from the registered methods.
"""
from __future__ import annotations

import copy
import json
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.data.builders.longctx_tasks import CATEGORIES, TASKS, eval_prompts
from edge_jax.errors import ConfigError
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.infer.longctx_config import INWINDOW_TASKS
from edge_jax.registry import EVALUATORS, Evaluator
from edge_jax.train.qa import score_answers  # (registers the core's qa evaluator before these)
from edge_jax.train.workdir import load_workdir_config


def make_session(method: str, model, params, config):
    """The inference session of ``method`` (a :data:`KV_METHODS` name) with the config's sizes and
    ``longctx.budget``; an unknown name is a one-line ConfigError."""
    return KV_METHODS.get(method).from_config(model, params, config, config.longctx.budget)


def answer(session, prompt_ids, answer_ids, tokenizer, max_tokens: int) -> tuple[str, float]:
    """One prompt (batch of one): the first line of the greedy continuation, and the teacher-forced
    mean NLL (nats per token) of the gold answer tokens after the prompt (``prompt + " " + answer``,
    as in training). Both continue from one prefill: the session is copied after it."""
    logits = session.prefill(np.asarray(prompt_ids, np.int32)[None])
    forced = copy.copy(session)  # sessions replace, never mutate, their arrays: a cheap snapshot
    nll, step_logits = [], logits
    for i, token in enumerate(answer_ids):
        logp = jax.nn.log_softmax(jnp.asarray(step_logits[0], jnp.float32))
        nll.append(-float(logp[token]))
        if i + 1 < len(answer_ids):
            step_logits = forced.step(np.array([[token]], np.int32))
    out = []
    for i in range(max_tokens):
        token = int(np.argmax(np.asarray(logits[0])))
        if token == tokenizer.eos_id:
            break
        out.append(token)
        if "\n" in tokenizer.decode(out) or i == max_tokens - 1:
            break
        logits = session.step(np.array([[token]], np.int32))
    return tokenizer.decode(out).strip().split("\n")[0].strip(), float(np.mean(nll))


def evaluate_longctx(model, params, tokenizer, config, log=print) -> dict:
    """Run ``config.longctx.method`` over every task and length; the metrics of the module docstring."""
    lc = config.longctx
    tasks = tuple(lc.tasks) or TASKS
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ConfigError(f"unknown longctx.tasks {unknown}; valid: {', '.join(TASKS)}")
    session = make_session(lc.method, model, params, config)
    hits: dict[tuple[str, int], list[bool]] = {}
    nlls: dict[tuple[str, int], list[float]] = {}
    t0, peak = time.perf_counter(), 0
    lengths, near = [int(n) for n in lc.lengths], [int(n) for n in lc.near_lengths]
    for length in near + lengths:
        for task in tasks:
            for rec in eval_prompts(task, length, int(lc.examples), int(config.seed)):
                ids = tokenizer.encode(rec["prompt"])
                if len(ids) > lc.max_input:
                    raise ConfigError(f"a {task} prompt of {len(ids)} tokens exceeds longctx.max_input={lc.max_input}; "
                                      "raise the limit or shorten longctx.lengths")
                gold = tokenizer.encode(rec["text"])[len(ids):]
                got, nll = answer(session, ids, gold, tokenizer, lc.answer_tokens)
                hits.setdefault((task, length), []).append(got == rec["answer"].strip())
                nlls.setdefault((task, length), []).append(nll)
                peak = max(peak, _cached_tokens(session))
        log(f"longctx {lc.method} length {length}: " + ", ".join(
            f"{t} {100 * np.mean(hits[(t, length)]):.0f}" for t in tasks))
    out = {}
    for length in near + lengths:
        for task in tasks:
            out[f"longctx/{CATEGORIES[task]}/len{length}"] = 100.0 * float(np.mean(hits[(task, length)]))
        out[f"longctx/len{length}"] = float(np.mean([out[f"longctx/{CATEGORIES[t]}/len{length}"] for t in tasks]))
    out.update(_band("longctx/", lengths, tasks, out, nlls))
    if near:
        out.update(_band("longctx/near/", near, tasks, out, nlls))
    out["longctx/prompts"] = sum(len(v) for v in hits.values())
    out["longctx/peak_cache_tokens"] = peak
    out["longctx/seconds"] = time.perf_counter() - t0
    out.update(base_inwindow(config.init_from))
    return out


def _band(prefix: str, lengths: list[int], tasks, per_length: dict, nlls: dict) -> dict:
    """One band's scores under ``prefix``: exact match per category (mean over the band's lengths) and
    overall (mean over categories), the answer NLL per category (mean over its prompts) and overall."""
    out = {}
    for task in tasks:
        cat = CATEGORIES[task]
        out[f"{prefix}{cat}"] = float(np.mean([per_length[f"longctx/{cat}/len{n}"] for n in lengths]))
        out[f"{prefix}answer_nll/{cat}"] = float(np.mean([v for n in lengths for v in nlls[(task, n)]]))
    out[f"{prefix}overall"] = float(np.mean([out[f"{prefix}{CATEGORIES[t]}"] for t in tasks]))
    out[f"{prefix}answer_nll"] = float(np.mean([out[f"{prefix}answer_nll/{CATEGORIES[t]}"] for t in tasks]))
    return out


def evaluate_inwindow(model, params, tokenizer, config, log=print) -> dict:
    """The in-window check: exact match (percent) and answer NLL of passkey and multikey prompts of
    ``longctx.inwindow_lengths`` (drawn with the seed), answered greedily with full attention."""
    lc = config.longctx
    out, t0 = {}, time.perf_counter()
    for task in INWINDOW_TASKS:
        cat, nlls = CATEGORIES[task], []
        for length in lc.inwindow_lengths:
            qa = eval_prompts(task, int(length), int(lc.inwindow_examples), int(config.seed))
            scores = score_answers(model, params, tokenizer, qa, max_new_tokens=lc.answer_tokens, batch_size=16)
            out[f"inwindow/{cat}/len{length}"] = 100.0 * scores["exact_match"]
            nlls.append(scores["answer_nll"])
        out[f"inwindow/{cat}"] = float(np.mean([out[f"inwindow/{cat}/len{n}"] for n in lc.inwindow_lengths]))
        out[f"inwindow/answer_nll/{cat}"] = float(np.mean(nlls))
        log(f"in-window {task}: " + ", ".join(f"len {n} {out[f'inwindow/{cat}/len{n}']:.0f}%"
                                               for n in lc.inwindow_lengths))
    out["inwindow/prompts"] = len(INWINDOW_TASKS) * len(lc.inwindow_lengths) * int(lc.inwindow_examples)
    out["inwindow/seconds"] = time.perf_counter() - t0
    return out


def base_inwindow(workdir: str, depth: int = 4) -> dict:
    """The in-window metrics of the base a run starts from, as ``base/inwindow/...``: those in
    ``workdir``'s final_metrics.json, else its own ``init_from``'s (a gate's base), up to ``depth``
    runs back; {} when there are none (no base, or one trained without the check)."""
    for _ in range(depth):
        if not workdir:
            return {}
        try:
            with open(os.path.join(workdir, "final_metrics.json")) as f:
                metrics = json.load(f)
        except (OSError, ValueError):
            metrics = {}
        found = {f"base/{k}": v for k, v in metrics.items() if k.startswith("inwindow/")}
        if found:
            return found
        try:
            workdir = load_workdir_config(workdir).get("init_from", "")
        except (OSError, ValueError):
            return {}
    return {}


def _cached_tokens(session) -> int:
    """Most prompt + answer tokens any layer holds right now."""
    return int(max(np.asarray(c["valid"]).sum(axis=-1).max() for c in session.caches))


def method_cells(base_lm_cell: Callable[[str], dict], own_cells: dict[str, dict]) -> dict[str, dict]:
    """A comparison grid's cells, one per registered KV method in registration order: a method that
    runs on the base LM as trained (``base_lm``) gets ``base_lm_cell(name)``; one that needs params
    trained for it gets ``own_cells[name]`` (its stage is the caller's) and is left out when the
    caller has none for it."""
    cells = {}
    for name, method in KV_METHODS.items():
        if method.base_lm:
            cells[name] = base_lm_cell(name)
        elif name in own_cells:
            cells[name] = own_cells[name]
    return cells


EVALUATORS.register("longctx", Evaluator(
    enabled=lambda config: bool(config.longctx.method),
    run=lambda ctx: evaluate_longctx(ctx.run.model, ctx.params, ctx.run.tokenizer, ctx.config)))
EVALUATORS.register("inwindow", Evaluator(
    enabled=lambda config: config.longctx.inwindow_examples > 0,
    run=lambda ctx: evaluate_inwindow(ctx.run.model, ctx.params, ctx.run.tokenizer, ctx.config)))
