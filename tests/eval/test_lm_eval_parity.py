"""Parity of our zero-shot scorer with lm-evaluation-harness (the installed lm-eval, HF backend).

The same random tiny ``Qwen3ForCausalLM`` (:mod:`edge_jax.eval.tiny_hf`) is scored twice on the ten MeKi tasks: by
lm-eval's ``HFLM`` (through lm-eval's own task YAMLs, re-pointed at local JSONL documents) and by our :class:`Scorer` on
the converted parameters. Both read the same tokenizer: a byte-level BPE trained here on a few KB
of text, so nothing is downloaded. Per task, every request's (context, continuation) strings must be
equal to lm-eval's ``arguments`` (the prompt formats), every log-likelihood within 1e-4 with the same
``is_greedy`` flag, and acc / acc_norm / perplexity as lm-eval reports them. One more run with a short
``max_length`` compares left truncation. Documents: ``lm_eval_fixtures/<task>/<split>.jsonl``, a few
hand-written ones per task in the Hugging Face layout, plus LAMBADA documents generated from the
model's own greedy predictions so that ``is_greedy`` / LAMBADA acc is not trivially all-False.
"""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("lm_eval", "accelerate", "torch", "transformers")  # accelerate: HFLM
import lm_eval  # noqa: E402
import torch  # noqa: E402

from edge_jax.data.tokenizers import HfTokenizer  # noqa: E402
from edge_jax.eval import benchmarks, tiny_hf  # noqa: E402
from edge_jax.eval.scorer import Scorer, encode_pair  # noqa: E402
from edge_jax.eval.suite import aggregate, score_task  # noqa: E402
from edge_jax.eval.tasks import ZERO_SHOT_TASKS  # noqa: E402
from edge_jax.models.decoder import DecoderLM  # noqa: E402

FIXTURES = Path(__file__).parent / "lm_eval_fixtures"
LL_TOL = 1e-4
MAX_LENGTH = 512  # no request comes near it: nothing truncates
SHORT_LENGTH, SHORT_TASK = 24, "arc_easy"  # left truncation
# lm-eval's YAML for each task, relative to lm_eval/tasks/.
LM_EVAL_YAML = {
    "arc_easy": "arc/arc_easy.yaml", "arc_challenge": "arc/arc_challenge.yaml",
    "boolq": "super_glue/boolq/default.yaml",
    "copa": "super_glue/copa/default.yaml", "hellaswag": "hellaswag/hellaswag.yaml",
    "lambada_openai": "lambada/lambada_openai.yaml", "openbookqa": "openbookqa/openbookqa.yaml",
    "piqa": "piqa/piqa.yaml", "sciq": "sciq/sciq.yaml", "winogrande": "winogrande/default.yaml",
}
TASK_NAMES = tuple(benchmarks.TEN_BENCHMARKS)
ENCODE_CHECKS = ["Question: What is the sun?\nAnswer:", " yes", "  two spaces", "a\n\nb \n", " café — naïve",
                 "trailing space ", "\"Don't,\" she said.", "<|endoftext|> after"]


def _greedy_lambada_docs(model, tok: HfTokenizer, n: int = 2) -> list[dict]:
    """LAMBADA texts whose last word is the model's own greedy next token (one token " word"), so at
    least ``n`` requests are greedy (is_greedy True, LAMBADA acc > 0) on both sides."""
    words = (FIXTURES / "corpus.txt").read_text().split()
    out = []
    for start in range(0, len(words) - 12, 3):
        context = " ".join(words[start:start + 10])
        ids = tok.encode(context)
        with torch.no_grad():
            nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
        piece = tok.decode([nxt])
        if re.fullmatch(r" [A-Za-z]+", piece) and tok.encode(context + piece) == ids + [nxt]:
            out.append({"text": context + piece})
            if len(out) == n:
                return out
    raise AssertionError(f"found only {len(out)} greedy LAMBADA contexts; change the corpus or the seed")


def _write_yamls(yaml_dir: Path, data_dir: Path, cache_dir: Path, tasks, suffix: str = "") -> dict[str, str]:
    """One YAML per task: lm-eval's own (``include`` by absolute path, so its ``!function`` utils
    resolve next to it) re-pointed at our JSONL; renamed ``parity<suffix>_<task>``."""
    tasks_root = Path(lm_eval.__file__).parent / "tasks"
    yaml_dir.mkdir()
    names = {}
    for task in tasks:
        split = ZERO_SHOT_TASKS.get(task).eval_split
        name = f"parity{suffix}_{task}"
        cfg = {"include": str(tasks_root / LM_EVAL_YAML[task]), "task": name, "tag": [],
               "dataset_path": "json", "dataset_name": None,
               "dataset_kwargs": {"data_files": {split: str(data_dir / task / f"{split}.jsonl")},
                                  "cache_dir": str(cache_dir)},
               "training_split": None, "validation_split": split if split == "validation" else None,
               "test_split": split if split == "test" else None}
        (yaml_dir / f"{name}.yaml").write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        names[task] = name
    return names


def _run_lm_eval(model, hf_tok, yaml_dir: Path, names: dict[str, str], max_length: int) -> dict:
    from lm_eval.tasks import TaskManager
    lm = tiny_hf.hflm(model, hf_tok, batch_size=4, max_length=max_length)
    return lm_eval.simple_evaluate(model=lm, tasks=list(names.values()), num_fewshot=0, log_samples=True,
                                   task_manager=TaskManager(include_path=str(yaml_dir), include_defaults=False),
                                   bootstrap_iters=0, verbosity="ERROR")


def _lm_eval_side(out: dict, task_name: str) -> tuple[dict, list[dict]]:
    samples = sorted(out["samples"][task_name], key=lambda s: s["doc_id"])
    return out["results"][task_name], samples


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lm_eval_parity")
    mp = pytest.MonkeyPatch()
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp / "hf_home"),
                       "HF_DATASETS_CACHE": str(tmp / "hf_datasets"), "TOKENIZERS_PARALLELISM": "false"}.items():
        mp.setenv(key, value)
    import datasets.config  # already imported (by another test) it read the environment then: patch it too
    import huggingface_hub.constants
    mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for key, value in {"HF_HUB_OFFLINE": True, "HF_DATASETS_OFFLINE": True, "HF_DATASETS_CACHE": tmp / "hf_datasets"
                       }.items():
        mp.setattr(datasets.config, key, value)
    try:
        pair = tiny_hf.build((FIXTURES / "corpus.txt").read_text(), tmp, MAX_LENGTH)
        ours_tok, hf_tok, model, cfg, params = pair.tokenizer, pair.hf_tokenizer, pair.model, pair.config, pair.params

        data_dir = tmp / "data"
        shutil.copytree(FIXTURES, data_dir, ignore=shutil.ignore_patterns("*.txt"))
        with open(data_dir / "lambada_openai" / "test.jsonl", "a") as f:
            f.writelines(json.dumps(d) + "\n" for d in _greedy_lambada_docs(model, ours_tok))

        yaml_dir, short_dir = tmp / "yaml", tmp / "yaml_short"
        names = _write_yamls(yaml_dir, data_dir, tmp / "hf_datasets", TASK_NAMES)
        short_name = _write_yamls(short_dir, data_dir, tmp / "hf_datasets", [SHORT_TASK], "_short")[SHORT_TASK]
        theirs = _run_lm_eval(model, hf_tok, yaml_dir, names, MAX_LENGTH)
        theirs_short = _run_lm_eval(model, hf_tok, short_dir, {SHORT_TASK: short_name}, SHORT_LENGTH)

        apply = DecoderLM(cfg).apply
        scorer = Scorer(apply, params["params"], ours_tok, max_length=MAX_LENGTH, batch_size=4, progress=False)
        ours = {t: score_task(scorer, ZERO_SHOT_TASKS.get(t), str(data_dir)) for t in TASK_NAMES}
        short = Scorer(apply, params["params"], ours_tok, max_length=SHORT_LENGTH, batch_size=4, progress=False)
        ours_short = score_task(short, ZERO_SHOT_TASKS.get(SHORT_TASK), str(data_dir))
        yield dict(ours_tok=ours_tok, hf_tok=hf_tok,
                   runs={t: (ours[t], _lm_eval_side(theirs, names[t])) for t in TASK_NAMES},
                   short=(ours_short, _lm_eval_side(theirs_short, short_name)))
    finally:
        mp.undo()


def test_tokenizers_encode_identically(parity):
    ours, hf = parity["ours_tok"], parity["hf_tok"]
    assert 300 <= ours.vocab_size <= 500 and ours.eos_id == hf.eos_token_id and ours.pad_id == hf.pad_token_id
    for text in ENCODE_CHECKS:
        assert ours.encode(text) == hf.encode(text) == hf(text)["input_ids"], text
        assert ours.decode(ours.encode(text)) == text


def _compare(run, task: str, label: str) -> float:
    """Assert one task's parity; return the largest |delta log-likelihood|."""
    (metrics, per_doc), (their_metrics, samples) = run
    assert [s["doc_id"] for s in samples] == list(range(len(per_doc))), label
    worst = 0.0
    for (example, results), sample in zip(per_doc, samples):
        their_args = [tuple(a) for a in sample["arguments"]]
        assert list(example.requests) == their_args, f"{label} doc {sample['doc_id']}: prompts differ"
        theirs = [(float(ll), bool(g)) for ll, g in sample["filtered_resps"]]
        assert len(theirs) == len(results)
        for (ll, greedy), (their_ll, their_greedy) in zip(results, theirs):
            worst = max(worst, abs(ll - their_ll))
            assert abs(ll - their_ll) < LL_TOL, f"{label} doc {sample['doc_id']}: {ll} vs {their_ll}"
            assert greedy == their_greedy, f"{label} doc {sample['doc_id']}: is_greedy differs"
        mine = aggregate(ZERO_SHOT_TASKS.get(task), [example], [results])  # this document's metrics
        for key in ("acc", "acc_norm"):
            if key in sample:
                assert mine[key] == sample[key], f"{label} doc {sample['doc_id']}: {key} differs"
    for key in ("acc", "acc_norm"):
        if f"{key},none" in their_metrics:
            assert metrics[key] == pytest.approx(their_metrics[f"{key},none"], abs=1e-12), f"{label} {key}"
    assert "acc,none" in their_metrics
    if "perplexity,none" in their_metrics:
        assert metrics["perplexity"] == pytest.approx(their_metrics["perplexity,none"], rel=1e-4)
    print(f"{label}: docs={len(per_doc)} requests={metrics['requests']} max|dll|={worst:.2e} acc={metrics['acc']:.3f}"
          + (f" acc_norm={metrics['acc_norm']:.3f}" if "acc_norm,none" in their_metrics else "")
          + (f" ppl={metrics['perplexity']:.4g}" if "perplexity" in metrics else ""))
    return worst


@pytest.mark.parametrize("task", TASK_NAMES)
def test_matches_lm_eval(parity, task):
    _compare(parity["runs"][task], task, task)


def test_acc_norm_is_per_character(parity):
    """Some fixture document (OpenBookQA's accented choices) ranks differently per character and per
    UTF-8 byte, so the acc_norm parity above tells lm-eval's per-character normalisation apart."""
    differ = []
    for task in TASK_NAMES:
        if ZERO_SHOT_TASKS.get(task).format.kind == "multiple_choice":
            for i, (example, results) in enumerate(parity["runs"][task][0][1]):
                m = aggregate(ZERO_SHOT_TASKS.get(task), [example], [results])
                differ += [(task, i)] if m["acc_norm"] != m["acc_bytes"] else []
    assert differ, "no document where per-character and per-byte normalisation disagree"


def test_lambada_has_greedy_requests(parity):
    """The generated documents make LAMBADA acc non-zero, so is_greedy parity is not vacuous."""
    (metrics, per_doc), _ = parity["runs"]["lambada_openai"]
    assert 0 < metrics["acc"] < 1 and sum(r[0][1] for _, r in per_doc) >= 2


def test_left_truncation_matches_lm_eval(parity):
    (metrics, per_doc), _ = parity["short"]
    tok = parity["ours_tok"]
    lengths = [sum(map(len, encode_pair(tok, *req))) for ex, _ in per_doc for req in ex.requests]
    assert max(lengths) > SHORT_LENGTH + 1 + 10, "no request is truncated: lower SHORT_LENGTH"
    _compare(parity["short"], SHORT_TASK, f"{SHORT_TASK}@max_length={SHORT_LENGTH}")
    # Truncation changed the scores: the same requests at full length differ.
    (_, full), _ = parity["runs"][SHORT_TASK]
    assert not np.allclose([r[0] for _, res in per_doc for r in res], [r[0] for _, res in full for r in res])
