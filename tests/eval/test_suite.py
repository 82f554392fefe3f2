"""Task formats, few-shot contexts, local task files, aggregation and the task runner (no model)."""
import gzip
import json
import math
import os

import numpy as np
import pytest

from edge_jax.data import DataError
from edge_jax.eval import benchmarks  # noqa: F401  (registers the ten tasks)
from edge_jax.eval.files import read_split
from edge_jax.eval.suite import aggregate, run_tasks, task_examples
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, Example, TaskError, build_examples, expand

DOCS = {
    "arc_easy": {"question": "Which is a gas?", "choices": {"text": ["ice", "steam", "rock"], "label": ["A", "B", "C"]},
                 "answerKey": "B"},
    "boolq": {"passage": "Cats purr.", "question": "do cats purr", "label": 1},
    "copa": {"premise": "The man broke his toe.", "choice1": "He dropped a hammer.", "choice2": "He sang.",
             "question": "cause", "label": 0},
    "hellaswag": {"activity_label": "Baking", "ctx_a": "A man mixes flour.", "ctx_b": "he [header] then",
                  "endings": ["bakes bread.", "[title] swims."], "label": "0"},
    "lambada_openai": {"text": "She opened the door and saw the cat"},
    "openbookqa": {"question_stem": "The sun is", "choices": {"text": ["cold", "a star"], "label": ["A", "B"]},
                   "answerKey": "B"},
    "piqa": {"goal": "open a jar", "sol1": "twist the lid", "sol2": "eat the lid", "label": 0},
    "sciq": {"support": "  Water boils at 100 C.", "question": "When does water boil?", "distractor1": "50 C",
             "distractor2": "0 C", "distractor3": "10 C", "correct_answer": "100 C"},
    "winogrande": {"sentence": "The cup fell off the table because _ was slippery.", "option1": "the cup",
                   "option2": "the table", "answer": "2"},
}


def test_formats_build_lm_evals_requests():
    req = {name: ZERO_SHOT_TASKS.get(name).format.requests(doc) for name, doc in DOCS.items()}
    question = "Question: Which is a gas?\nAnswer:"
    assert req["arc_easy"] == [(question, " ice"), (question, " steam"), (question, " rock")]
    assert req["boolq"][1] == ("Cats purr.\nQuestion: do cats purr?\nAnswer:", " yes")
    assert req["copa"][0] == ("The man broke his toe because", "  he dropped a hammer.")  # lm-eval's double space
    assert req["hellaswag"] == [("Baking: A man mixes flour. He then", " bakes bread."),
                                ("Baking: A man mixes flour. He then", "  swims.")]  # markup removed after strip
    assert req["lambada_openai"] == [("She opened the door and saw the", " cat")]
    assert req["openbookqa"][1] == ("The sun is", " a star")
    assert req["sciq"][3] == ("Water boils at 100 C.\nQuestion: When does water boil?\nAnswer:", " 100 C")
    assert req["winogrande"] == [("The cup fell off the table because the cup", " was slippery."),
                                 ("The cup fell off the table because the table", " was slippery.")]
    golds = {name: ZERO_SHOT_TASKS.get(name).format.gold(doc) for name, doc in DOCS.items()}
    assert golds == {"arc_easy": 1, "boolq": 1, "copa": 0, "hellaswag": 0, "lambada_openai": 0, "openbookqa": 1,
                     "piqa": 0, "sciq": 3, "winogrande": 1}


def test_fewshot_contexts_are_seeded_and_exclude_the_document():
    task = ZERO_SHOT_TASKS.get("piqa")
    docs = [{"goal": f"goal {i}", "sol1": f"a{i}", "sol2": f"b{i}", "label": i % 2} for i in range(6)]
    one = build_examples(task, docs, docs, k=2, seed=3)
    assert one == build_examples(task, docs, docs, k=2, seed=3)
    assert one != build_examples(task, docs, docs, k=2, seed=4)
    for i, ex in enumerate(one):
        ctx = ex.requests[0][0]
        assert ctx.endswith(f"Question: goal {i}\nAnswer:") and ctx.count("Question:") == 3
        assert f"goal {i}\n" not in ctx[:-len(f"Question: goal {i}\nAnswer:")]  # not its own shot
        shot = ctx.split("\n\n")[0]
        j = int(shot.split("goal ")[1].split("\n")[0])
        assert shot == f"Question: goal {j}\nAnswer: {'ab'[j % 2]}{j}"
    wino = ZERO_SHOT_TASKS.get("winogrande")
    shot = wino.format.shot(DOCS["winogrande"])
    assert shot == "The cup fell off the table because the table was slippery."
    with pytest.raises(TaskError, match="larger than the 6 documents"):
        build_examples(task, docs, docs[:6], k=7)


def test_aggregate_acc_norm_bytes_stderr_and_perplexity():
    task = ZERO_SHOT_TASKS.get("arc_easy")
    ex = [Example((("q", " a"), ("q", " bbbb")), 1, ((1, 1), (4, 4))),
          Example((("q", " é"), ("q", " bb")), 0, ((1, 2), (2, 2)))]
    res = [[(-2.0, False), (-3.0, False)], [(-2.2, False), (-4.0, False)]]
    m = aggregate(task, ex, res)
    # doc 0: acc picks 0 (wrong), per char picks 1 (-0.75 > -2): right. doc 1: acc right; per char -2.2 vs -2.0
    # picks 1 (wrong); per byte -1.1 vs -2.0 picks 0 (right)
    assert (m["acc"], m["acc_norm"], m["acc_bytes"]) == (0.5, 0.5, 1.0)
    assert m["acc_stderr"] == pytest.approx(np.std([0, 1], ddof=1) / math.sqrt(2))
    assert m["chance"] == 0.5
    lam = aggregate(ZERO_SHOT_TASKS.get("lambada_openai"), [Example((("a", " b"),), 0, ((0, 0),))] * 2,
                    [[(-1.0, True)], [(-3.0, False)]])
    assert lam["acc"] == 0.5 and lam["perplexity"] == pytest.approx(math.exp(2.0)) and "acc_norm" not in lam
    wino = aggregate(ZERO_SHOT_TASKS.get("winogrande"), [Example((("a", " x"), ("b", " x")), 1, ((1, 1), (1, 1)))],
                     [[(-5.0, False), (-1.0, False)]])
    assert wino["acc"] == 1.0 and "acc_norm" not in wino


def _write_jsonl(path, records):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def test_local_files_jsonl_gz_and_parquet_shards(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    arc = [DOCS["arc_easy"], {**DOCS["arc_easy"], "question": "Which is a metal?"}]
    os.makedirs(tmp_path / "arc_easy")
    pq.write_table(pa.Table.from_pylist(arc[:1]), tmp_path / "arc_easy" / "test-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(arc[1:]), tmp_path / "arc_easy" / "test-00001-of-00002.parquet")
    docs = read_split(str(tmp_path), "arc_easy", "test", ("question", "choices.text", "choices.label", "answerKey"))
    assert [d["question"] for d in docs] == ["Which is a gas?", "Which is a metal?"]
    assert docs[0]["choices"]["text"] == ["ice", "steam", "rock"]
    os.makedirs(tmp_path / "piqa")
    with gzip.open(tmp_path / "piqa" / "validation.jsonl.gz", "wt") as f:
        f.write(json.dumps(DOCS["piqa"]) + "\n\n")
    assert read_split(str(tmp_path), "piqa", "validation", ("goal",)) == [DOCS["piqa"]]


def test_task_file_errors_are_one_line(tmp_path):
    with pytest.raises(TaskError) as e:
        read_split(str(tmp_path), "boolq", "validation", ("passage", "question", "label"))
    assert "no directory" in str(e.value) and "validation.jsonl" in str(e.value) and "\n" not in str(e.value)
    _write_jsonl(str(tmp_path / "boolq" / "validation.jsonl"), [{"passage": "p", "question": "q"}])
    with pytest.raises(TaskError, match="has no field 'label' \\(it has passage, question\\)"):
        read_split(str(tmp_path), "boolq", "validation", ("passage", "question", "label"))
    with open(tmp_path / "boolq" / "validation.jsonl", "w") as f:
        f.write('{"passage": "p"}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2 is a JSON list, not an object"):
        read_split(str(tmp_path), "boolq", "validation", ("passage",))
    with pytest.raises(TaskError, match="no 'train' split"):
        read_split(str(tmp_path), "boolq", "train", ("passage",))


def test_unknown_task_names_the_nearest():
    assert expand("meki10")[:2] == ["arc_easy", "arc_challenge"] and len(expand("meki10,boolq")) == 10
    with pytest.raises(TaskError) as e:
        expand("hellaswg")
    assert "did you mean 'hellaswag'" in str(e.value)
    with pytest.raises(TaskError, match="no zero-shot task named"):
        expand(" , ")


class FakeScorer:
    """Log-likelihood = minus the continuation's length: prefers the shortest choice."""
    max_length = 64

    def rows(self, requests):
        return [cont for _, cont in requests]

    def score_rows(self, rows):
        return [(-float(len(cont)), len(cont) < 5) for cont in rows]


def test_run_tasks_writes_one_json_per_task_and_averages(tmp_path, capsys):
    data = tmp_path / "data"
    _write_jsonl(str(data / "boolq" / "validation.jsonl"), [DOCS["boolq"], {**DOCS["boolq"], "label": 0}])
    _write_jsonl(str(data / "openbookqa" / "test.jsonl"), [DOCS["openbookqa"]] * 3)
    out = tmp_path / "eval"
    summary = run_tasks(FakeScorer(), "boolq,openbookqa", data_dir=str(data), out_dir=str(out))
    # boolq: " no" is shorter -> predicts 0: one of two right; openbookqa: " cold" shorter, gold is 1: none right
    assert summary == {"zero_shot/boolq": 0.5, "zero_shot/openbookqa": 0.0, "zero_shot_avg": 0.25}
    record = json.loads((out / "boolq.json").read_text())
    assert record["version"] == "lm-eval boolq v2.0" and record["n"] == 2 and record["chance"] == 0.5
    assert record["acc_stderr"] == pytest.approx(0.5)
    assert "| **average** | 0.2500 |" in capsys.readouterr().out
    # a task whose files are missing fails before any task is scored or written
    (out / "boolq.json").unlink()
    with pytest.raises(TaskError, match="piqa: no directory"):
        run_tasks(FakeScorer(), "boolq,piqa", data_dir=str(data), out_dir=str(out))
    assert not (out / "boolq.json").exists()
    with pytest.raises(TaskError, match="pass --data-dir"):
        run_tasks(FakeScorer(), "boolq", out_dir=str(out))


def test_limit_and_fewshot_pool(tmp_path):
    data = tmp_path / "data"
    docs = [{**DOCS["piqa"], "goal": f"g{i}"} for i in range(5)]
    _write_jsonl(str(data / "piqa" / "validation.jsonl"), docs)
    with pytest.raises(TaskError, match="no 'train' split"):
        task_examples(ZERO_SHOT_TASKS.get("piqa"), str(data), num_fewshot=1)
    _write_jsonl(str(data / "piqa" / "train.jsonl"), docs[:2])
    ex = task_examples(ZERO_SHOT_TASKS.get("piqa"), str(data), num_fewshot=2, limit=3)
    assert len(ex) == 3 and all(e.requests[0][0].count("Question:") == 3 for e in ex)
    with pytest.raises(TaskError, match="larger than the 2 documents"):
        task_examples(ZERO_SHOT_TASKS.get("piqa"), str(data), num_fewshot=3)
    with pytest.raises(TaskError, match="no split to draw few-shot"):
        task_examples(ZERO_SHOT_TASKS.get("lambada_openai"), str(data), num_fewshot=1)
