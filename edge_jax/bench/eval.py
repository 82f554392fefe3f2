"""``edge-jax bench eval``: our zero-shot scorer against lm-evaluation-harness's HF model, requests per second.

Both score the same random tiny Qwen3 (:mod:`edge_jax.eval.tiny_hf`, the parity test's construction:
a byte-level BPE trained on the parity fixtures' corpus, the HF model, our parameters converted from
it) on the same ``(context, continuation)`` requests, with the same batch size and ``max_length``, in
one process. Three tasks (:func:`build_requests`):

- ``short_mc``: the arc_easy and piqa fixture documents in lm-eval's prompt formats, copied until
  there are ``--requests`` requests; copy k's contexts start with ``"k. "`` so no two requests are
  equal (lm-eval computes a repeated request once).
- ``long_context``: passages of the fixture corpus filling 75-97% of ``max_length`` tokens, each
  followed by four 6-word continuations (the true next words and three other spans), so the four
  requests of a passage share their context as a multiple-choice document's do.
- ``lambada``: lambada_openai's format on 30-89-word windows of the corpus (the last word is the target;
  shortened from the front where they would not fit ``max_length``).

Per task, each side first scores every request once (warm-up: our JIT compiles, one per length
bucket, and torch's first calls are not timed); then ``--repeats`` rounds alternate ours and
lm-eval's, each timing a full call from strings to ``(log-likelihood, is_greedy)``, tokenisation
included. The last round's results of the two must agree (log-likelihoods within 1e-4, same
``is_greedy``): a row that does not is marked and the goal fails. Threads (``--threads``): ``1``
(default) gives torch one thread (``torch.set_num_threads(1)``) and XLA's CPU client one
(``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``, set before JAX
starts); ``all`` gives both every core (torch ``set_num_threads(cores)``, XLA's default). One
thread each is the default because on a shared machine torch's spinning thread pool loses most of
its time to other processes once it has more threads than it has free cores.
"""
from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import edge_jax
from edge_jax.bench.catalog import EVAL_TASKS as TASKS
from edge_jax.errors import ConfigError
from edge_jax.eval import tiny_hf
from edge_jax.eval.scorer import Scorer
from edge_jax.eval.suite import task_examples
from edge_jax.eval.tasks import ZERO_SHOT_TASKS
from edge_jax.models.decoder import DecoderLM
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.extras import require

LL_TOL = 1e-4
GOAL = 1.0  # ours / lm-eval's requests per second
FIXTURES = Path(edge_jax.__file__).resolve().parents[1] / "tests" / "eval" / "lm_eval_fixtures"


def _fixtures(path: str | None) -> Path:
    root = Path(path) if path else FIXTURES
    if not (root / "corpus.txt").is_file():
        raise ConfigError(f"no parity fixtures at {root} (corpus.txt and the task JSONL files); pass --fixtures "
                          "tests/eval/lm_eval_fixtures from a source checkout")
    return root


def _short_mc(fixtures: Path, n: int) -> list[tuple[str, str]]:
    base = [r for task in ("arc_easy", "piqa") for ex in task_examples(ZERO_SHOT_TASKS.get(task), str(fixtures))
            for r in ex.requests]
    out: list[tuple[str, str]] = []
    copy = 0
    while len(out) < n:
        out += [(f"{copy}. {ctx}" if copy else ctx, cont) for ctx, cont in base]
        copy += 1
    return out[:n]


def _long_context(words: list[str], tokenizer, n: int, max_length: int) -> list[tuple[str, str]]:
    span = 6
    per_word = len(tokenizer.encode(" ".join(words))) / len(words)
    out: list[tuple[str, str]] = []
    for doc in range(-(-n // 4)):
        start = 13 * doc
        target = max_length * (0.75 + 0.22 * (doc % 10) / 9)
        k = int(target / per_word)

        def text(first: int, length: int) -> str:
            return " ".join(words[(first + j) % len(words)] for j in range(length))

        choices = [" " + text(start + k, span)] + [" " + text(start + k + 41 * c, span) for c in (1, 2, 3)]
        while max(len(tokenizer.encode(text(start, k) + c)) for c in choices) > max_length:
            k -= 4
        out += [(text(start, k), c) for c in choices]
    return out[:n]


def _lambada(words: list[str], tokenizer, n: int, max_length: int) -> list[tuple[str, str]]:
    fmt = ZERO_SHOT_TASKS.get("lambada_openai").format
    out: list[tuple[str, str]] = []
    start = 0
    while len(out) < n:
        window = [words[(7 * start + j) % len(words)] for j in range(30 + start % 60)]
        window[-1] = window[-1].strip(".,;:!?\"'()")
        start += 1
        while len(tokenizer.encode(" ".join(window))) > max_length:
            window = window[4:]
        if window[-1]:
            out += fmt.requests({"text": " ".join(window)})
    return out[:n]


def build_requests(fixtures: Path, tokenizer, n: int, max_length: int, tasks=TASKS) -> dict[str, list]:
    """``n`` (context, continuation) requests per task, every one within ``max_length`` tokens."""
    words = (fixtures / "corpus.txt").read_text().split()
    make = {"short_mc": lambda: _short_mc(fixtures, n),
            "long_context": lambda: _long_context(words, tokenizer, n, max_length),
            "lambada": lambda: _lambada(words, tokenizer, n, max_length)}
    return {task: make[task]() for task in tasks}


def agreement(ours, theirs) -> tuple[float, int]:
    """(max |delta log-likelihood|, number of requests whose is_greedy differs)."""
    worst = max(abs(a[0] - b[0]) for a, b in zip(ours, theirs, strict=True))
    return float(worst), sum(bool(a[1]) != bool(b[1]) for a, b in zip(ours, theirs))


def measure(scorer, lm, requests: list[tuple[str, str]], repeats: int, tokenizer) -> dict:
    """One task's row: warm-up, ``repeats`` alternating rounds, the agreement of the last round."""
    from lm_eval.api.instance import Instance
    instances = [Instance("loglikelihood", {}, req, i) for i, req in enumerate(requests)]
    calls = {"ours": lambda: scorer(requests), "lm_eval": lambda: lm.loglikelihood(instances, disable_tqdm=True)}
    for fn in calls.values():
        fn()  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    last = {}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            last[name] = fn()
            seconds[name].append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    scorer.rows(requests)
    tokenise = time.perf_counter() - t0
    worst, greedy_diff = agreement(last["ours"], last["lm_eval"])
    lengths = [len(tokenizer.encode(c + x)) for c, x in requests]
    row = {"requests": len(requests), "mean_tokens": float(np.mean(lengths)), "max_tokens": max(lengths),
           "max_abs_dll": worst, "greedy_differ": greedy_diff, "agree": worst <= LL_TOL and not greedy_diff,
           "ours_tokenise_s": tokenise}
    for name, secs in seconds.items():
        rates = [len(requests) / s for s in secs]
        row.update({f"{name}_rps": statistics.median(rates), f"{name}_rps_min": min(rates),
                    f"{name}_rps_max": max(rates), f"{name}_s": secs})
    row["ratio"] = row["ours_rps"] / row["lm_eval_rps"]
    return row


def format_report(rows: dict[str, dict], args, threads: int) -> str:
    import jax
    import torch
    lines = [f"eval benchmark: tiny Qwen3 (d_model 64, 2 layers), batch {args.eval_batch}, max_length "
             f"{args.max_length}, {args.repeats} rounds after a warm-up; {threads} thread(s) each: torch "
             f"{torch.__version__}, jax {jax.__version__} on {jax.devices()[0].platform} "
             f"({os.cpu_count()} cores)", "",
             "| task | requests | tokens mean / max | ours req/s (min-max) | lm-eval req/s (min-max) | ours / lm-eval "
             "| max abs. Δ log-lik. |", "|---|---:|---|---|---|---:|---|"]
    for task, r in rows.items():
        check = f"{r['max_abs_dll']:.1e}" + ("" if r["agree"] else f" MISMATCH ({r['greedy_differ']} is_greedy)")
        lines.append(f"| {task} | {r['requests']} | {r['mean_tokens']:.0f} / {r['max_tokens']} "
                     f"| {r['ours_rps']:.1f} ({r['ours_rps_min']:.1f}-{r['ours_rps_max']:.1f}) "
                     f"| {r['lm_eval_rps']:.1f} ({r['lm_eval_rps_min']:.1f}-{r['lm_eval_rps_max']:.1f}) "
                     f"| {r['ratio']:.2f}x | {check} |")
    met = all(r["ratio"] >= GOAL and r["agree"] for r in rows.values())
    worst = min(rows.values(), key=lambda r: r["ratio"])["ratio"]
    lines += ["", "req/s: median over the rounds, strings in, (log-likelihood, is_greedy) out, tokenisation included.",
              f"goal: ours >= {GOAL:.1f}x lm-eval on every task, log-likelihoods within {LL_TOL:g}: "
              f"{'PASS' if met else 'FAIL'} (lowest ratio {worst:.2f}x)"]
    return "\n".join(lines)


XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def set_threads(threads: str) -> int:
    """Give torch and XLA the same threads (``1`` or ``all``); the number each gets."""
    import torch
    from jax._src import xla_bridge
    if threads == "all":
        n = os.cpu_count() or 1
    else:
        n = 1
        if XLA_ONE_THREAD not in os.environ.get("XLA_FLAGS", ""):
            if xla_bridge.backends_are_initialized():
                raise ConfigError("JAX started before bench eval could make XLA single-threaded; run it with "
                                  f"XLA_FLAGS='{XLA_ONE_THREAD}', or pass --threads all")
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + XLA_ONE_THREAD).strip()
    torch.set_num_threads(n)
    return n


def run(args, overrides) -> str:
    if overrides:
        raise ConfigError("bench eval takes no --config.* flags; drop them")
    for package in ("torch", "transformers", "lm_eval", "accelerate"):
        require(package, "bench eval")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    threads = set_threads(args.threads)
    fixtures = _fixtures(args.fixtures)
    tasks = args.task or list(TASKS)
    with tempfile.TemporaryDirectory() as tmp:
        pair = tiny_hf.build((fixtures / "corpus.txt").read_text(), Path(tmp), args.max_length)
    scorer = Scorer(DecoderLM(pair.config).apply, pair.params["params"], pair.tokenizer, max_length=args.max_length,
                    batch_size=args.eval_batch, progress=False)
    lm = tiny_hf.hflm(pair.model, pair.hf_tokenizer, args.eval_batch, args.max_length)
    requests = build_requests(fixtures, pair.tokenizer, args.requests, args.max_length, tasks)
    rows = {task: measure(scorer, lm, reqs, args.repeats, pair.tokenizer) for task, reqs in requests.items()}
    if args.json:
        write_json_atomic(args.json, [{"task": task, **row} for task, row in rows.items()])
    return format_report(rows, args, threads)
