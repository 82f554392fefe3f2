"""Score tasks with a :class:`~edge_jax.eval.scorer.Scorer` (or anything with its ``rows`` and
``score_rows``), aggregate as lm-eval does, write
``<out_dir>/<task>.json`` atomically, and print a table with the average and chance.

Metrics per task (``stderr``: sample standard deviation / sqrt(n), lm-eval's ``mean_stderr``):
``acc`` (argmax of summed log-likelihood; LAMBADA: the target is the greedy continuation),
``acc_norm`` (per character, lm-eval's normalisation) and ``acc_bytes`` (per UTF-8 byte) for
multiple_choice tasks, ``perplexity`` (exp of minus the mean log-likelihood) for LAMBADA, and
``chance`` (the mean of 1 / choices; 0 for LAMBADA). ``zero_shot_avg`` is the mean ``acc`` over the
tasks, the number MeKi's and PLM's tables average.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from edge_jax.eval.tasks import ZERO_SHOT_TASKS, BuiltinSource, Example, Task, TaskError, build_examples, expand
from edge_jax.utils.atomic import write_json_atomic

FEWSHOT_SEED = 1234  # lm-eval's default few-shot seed
RESULT_FORMAT = 1    # bump when the keys of eval/<task>.json change


def _stderr(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def aggregate(task: Task, examples: Sequence[Example], results: Sequence[Sequence[tuple[float, bool]]]) -> dict:
    """lm-eval's per-document metrics for ``task``, averaged, with their standard errors."""
    kind = task.format.kind
    per_doc: dict[str, list[float]] = {"acc": []}
    if kind == "loglikelihood":
        lls = [r[0][0] for r in results]
        per_doc["acc"] = [float(r[0][1]) for r in results]
        extra = {"perplexity": math.exp(-float(np.mean(lls))), "chance": 0.0}
    else:
        if kind == "multiple_choice":
            per_doc.update(acc_norm=[], acc_bytes=[])
        for ex, res in zip(examples, results):
            lls = np.array([ll for ll, _ in res])
            per_doc["acc"].append(float(np.argmax(lls) == ex.gold))
            if kind == "multiple_choice":
                chars, nbytes = (np.array(x, float) for x in zip(*ex.lengths))
                per_doc["acc_norm"].append(float(np.argmax(lls / chars) == ex.gold))
                per_doc["acc_bytes"].append(float(np.argmax(lls / nbytes) == ex.gold))
        extra = {"chance": float(np.mean([1.0 / len(ex.requests) for ex in examples]))}
    out: dict[str, Any] = {}
    for key, values in per_doc.items():
        out[key], out[f"{key}_stderr"] = float(np.mean(values)), _stderr(values)
    return {**out, **extra}


def task_examples(task: Task, source, num_fewshot: int = 0, limit: int = 0,
                  seed: int = FEWSHOT_SEED) -> list[Example]:
    """The task's evaluation documents (the first ``limit``; all when 0) as requests after
    ``num_fewshot`` seeded shots."""
    if num_fewshot and task.fewshot_split is None:
        raise TaskError(f"{task.name} has no split to draw few-shot examples from; run it with --num-fewshot 0")
    docs = task.load(source, task.eval_split)
    docs = docs[:limit] if limit > 0 else docs
    shots: Sequence[dict] = ()
    if num_fewshot:
        shots = docs if task.fewshot_split == task.eval_split else task.load(source, task.fewshot_split)
    return build_examples(task, docs, shots, num_fewshot, seed)


def score_examples(scorer, task: Task, examples: Sequence[Example], rows=None) -> tuple[dict, list]:
    """``(metrics, per-document (example, [(loglikelihood, is_greedy), ...]))`` of one task's examples;
    ``rows``: their requests already tokenised by ``scorer.rows``."""
    flat = [r for ex in examples for r in ex.requests]
    start = time.perf_counter()
    scored = scorer.score_rows(rows if rows is not None else scorer.rows(flat))
    seconds = time.perf_counter() - start
    results, i = [], 0
    for ex in examples:
        results.append(scored[i:i + len(ex.requests)])
        i += len(ex.requests)
    metrics = aggregate(task, examples, results)
    metrics.update(n=len(examples), requests=len(flat), seconds=seconds, requests_per_s=len(flat) / max(seconds, 1e-9))
    return metrics, list(zip(examples, results))


def score_task(scorer, task: Task, source, num_fewshot: int = 0, limit: int = 0) -> tuple[dict, list]:
    """:func:`score_examples` of the task's documents read from ``source``."""
    return score_examples(scorer, task, task_examples(task, source, num_fewshot, limit))


def source_for(task: Task, data_dir: str, builtin: BuiltinSource | None):
    """What ``task.load`` reads: the built-in source, or the data dir for file-backed tasks."""
    if task.builtin:
        return builtin
    if not data_dir:
        raise TaskError(f"task {task.name} reads its published files; pass --data-dir DIR (eval.data_dir; or "
                        "tfds:DIR) holding them (docs/eval.md lists the layout)")
    return data_dir


def run_tasks(scorer, names, *, data_dir: str = "", builtin: BuiltinSource | None = None, num_fewshot: int = 0,
              limit: int = 0, out_dir: str | None = None, info: dict | None = None,
              log: Callable[[str], None] | None = print) -> dict:
    """Score every task in ``names`` (groups expanded); write ``out_dir/<task>.json`` as each finishes.
    Returns ``{"zero_shot/<task>": acc, ..., "zero_shot_avg": mean acc}``. Every task's data is
    loaded and checked (:mod:`edge_jax.eval.validate`) before any model call, so a missing file or a
    record that cannot be scored fails before anything is scored or written."""
    tasks = [ZERO_SHOT_TASKS.get(n) for n in expand(names)]
    # every task's documents (and few-shot pool) are read up front: fail fast, write nothing half
    examples = {t.name: task_examples(t, source_for(t, data_dir, builtin), num_fewshot, limit) for t in tasks}
    # ... and tokenised (a request that cannot fit fails here too)
    tokens = {t.name: scorer.rows([r for ex in examples[t.name] for r in ex.requests]) for t in tasks}
    rows, summary = [], {}
    for t in tasks:
        metrics, _ = score_examples(scorer, t, examples[t.name], tokens[t.name])
        record = {"task": t.name, "version": t.version, "description": t.description, "split": t.eval_split,
                  "num_fewshot": num_fewshot, "fewshot_seed": FEWSHOT_SEED, "limit": limit,
                  "max_length": scorer.max_length, "result_format": RESULT_FORMAT, **(info or {}), **metrics}
        if out_dir:
            write_json_atomic(os.path.join(out_dir, f"{t.name}.json"), record)
        summary[f"zero_shot/{t.name}"] = metrics["acc"]
        rows.append((t.name, metrics))
    summary["zero_shot_avg"] = float(np.mean([m["acc"] for _, m in rows]))
    if log:
        log(format_table(rows, summary["zero_shot_avg"]))
    return summary


def format_table(rows: Sequence[tuple[str, dict]], average: float) -> str:
    """A markdown table: per task acc ± stderr, acc_norm, chance, documents."""
    def cell(m: dict, key: str) -> str:
        return f"{m[key]:.4f} ± {m[key + '_stderr']:.4f}" if key in m else "-"

    lines = ["| task | acc | acc_norm | chance | docs | other |", "|---|---:|---:|---:|---:|---|"]
    for name, m in rows:
        other = f"ppl {m['perplexity']:.4g}" if "perplexity" in m else ""
        lines.append(f"| {name} | {cell(m, 'acc')} | {cell(m, 'acc_norm')} | {m['chance']:.4f} | {m['n']} | {other} |")
    chance = float(np.mean([m["chance"] for _, m in rows]))
    lines.append(f"| **average** | {average:.4f} | | {chance:.4f} | | |")
    return "\n".join(lines)
