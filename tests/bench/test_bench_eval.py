"""``edge-jax bench eval`` on a handful of requests: the report's and the JSON's structure, the requests
it builds, and that its log-likelihood guard catches a scorer that disagrees with lm-eval. No timing
is asserted."""
import argparse
import json

import jax
import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("lm_eval", "accelerate", "torch", "transformers")

from edge_jax.bench import eval as bench_eval  # noqa: E402
from edge_jax.errors import ConfigError  # noqa: E402
from edge_jax.eval import tiny_hf  # noqa: E402
from edge_jax.eval.scorer import Scorer  # noqa: E402
from edge_jax.models.decoder import DecoderLM  # noqa: E402
from edge_jax.registry import BENCHMARKS  # noqa: E402

MAX_LENGTH, N, BATCH = 96, 6, 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    fixtures = bench_eval._fixtures(None)
    return tiny_hf.build((fixtures / "corpus.txt").read_text(), tmp_path_factory.mktemp("tiny_hf"), MAX_LENGTH)


def _args(tmp_path, **over):
    base = dict(task=None, requests=N, eval_batch=BATCH, max_length=MAX_LENGTH, threads="all", fixtures=None,
                repeats=1, json=str(tmp_path / "eval.json") if tmp_path else None)
    return argparse.Namespace(**{**base, **over})


def test_registered_with_its_flags():
    import edge_jax.bench.command  # noqa: F401  (imports every benchmark)
    bench = BENCHMARKS.get("eval")
    assert bench.writes_json and bench.defaults == {"repeats": 3}


def test_requests_fit_and_are_distinct(pair):
    requests = bench_eval.build_requests(bench_eval._fixtures(None), pair.tokenizer, 40, MAX_LENGTH)
    assert list(requests) == list(bench_eval.TASKS)
    for task, reqs in requests.items():
        assert len(reqs) == 40 and len(set(reqs)) == 40, task
        lengths = [len(pair.tokenizer.encode(c + x)) for c, x in reqs]
        assert max(lengths) <= MAX_LENGTH, task
    long_lengths = [len(pair.tokenizer.encode(c + x)) for c, x in requests["long_context"]]
    assert min(long_lengths) >= 0.6 * MAX_LENGTH
    assert len({c for c, _ in requests["long_context"]}) == 10  # four choices share each passage
    assert all(x.startswith(" ") and len(x.split()) == 1 for _, x in requests["lambada"])


def test_run_reports_every_task_and_writes_json(tmp_path):
    report = bench_eval.run(_args(tmp_path), [])
    rows = json.loads((tmp_path / "eval.json").read_text())
    assert [r["task"] for r in rows] == list(bench_eval.TASKS)
    for r in rows:
        assert r["requests"] == N and r["agree"] and r["max_abs_dll"] <= bench_eval.LL_TOL
        assert len(r["ours_s"]) == len(r["lm_eval_s"]) == 1
        assert r["ours_rps_min"] <= r["ours_rps"] <= r["ours_rps_max"]
        assert r["ratio"] == pytest.approx(r["ours_rps"] / r["lm_eval_rps"])
    lines = report.splitlines()
    assert lines[0].startswith("eval benchmark: tiny Qwen3") and f"batch {BATCH}" in lines[0]
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| task")]
    assert [line.split(" | ")[0][2:] for line in table] == list(bench_eval.TASKS)
    assert lines[-1].startswith("goal: ours >= 1.0x lm-eval on every task") and ("PASS" in lines[-1]) != (
        "FAIL" in lines[-1])


def test_guard_catches_a_scorer_that_disagrees(pair):
    """Weights off by 1% on our side: the rows are marked and the goal fails, whatever the timing."""
    off = jax.tree.map(lambda p: p * 1.01, pair.params["params"])
    scorer = Scorer(DecoderLM(pair.config).apply, off, pair.tokenizer, MAX_LENGTH, BATCH, progress=False)
    lm = tiny_hf.hflm(pair.model, pair.hf_tokenizer, BATCH, MAX_LENGTH)
    requests = bench_eval.build_requests(bench_eval._fixtures(None), pair.tokenizer, N, MAX_LENGTH, ("lambada",))
    row = bench_eval.measure(scorer, lm, requests["lambada"], 1, pair.tokenizer)
    assert not row["agree"] and row["max_abs_dll"] > bench_eval.LL_TOL
    row["ratio"] = 5.0  # fast but wrong still fails
    report = bench_eval.format_report({"lambada": row}, _args(None), 1)
    assert "MISMATCH" in report and report.splitlines()[-1].startswith("goal:") and "FAIL" in report.splitlines()[-1]


def test_agreement_counts_greedy_flags():
    worst, differ = bench_eval.agreement([(-1.0, True), (-2.0, False)], [(-1.00002, True), (-2.0, True)])
    assert np.isclose(worst, 2e-5) and differ == 1


def test_one_thread_needs_xla_flags_before_jax_starts(monkeypatch):
    jax.devices()  # started
    monkeypatch.setenv("XLA_FLAGS", "")
    with pytest.raises(ConfigError, match="JAX started before bench eval"):
        bench_eval.set_threads("1")
