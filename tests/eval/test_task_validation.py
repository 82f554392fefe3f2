"""Zero-shot task documents are checked when they load (edge_jax/eval/validate.py): for every task, a
well-formed split loads; a label out of range or of the wrong type, missing / null / empty text, an
ARC answerKey that is not among the choice labels, empty choices ... are one-line errors naming the
file and line (or source and record index) and the field, raised before anything is scored; through
``edge-jax eval --tasks`` they exit 2 with no traceback and no results written."""
import json
import os
import random

import numpy as np
import pytest

from edge_jax.cli import main
from edge_jax.errors import UserError
from edge_jax.eval import benchmarks, builtin  # noqa: F401  (register the tasks)
from edge_jax.eval.suite import run_tasks, task_examples
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, BuiltinSource, TaskError, build_examples
from edge_jax.eval.validate import RecordError, check_documents, schema
from edge_jax.train.loop import train_and_evaluate

WORDS = ("river stone lamp quiet orange falcon ladder copper window garden winter bright slowly paper "
         "kettle harbor velvet seven bridge candle meadow thunder pocket silver").split()


def _words(rng: random.Random, lo: int = 2, hi: int = 7) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _arc(rng, stem: str, digits: bool = False) -> dict:
    n = rng.randint(3, 5)
    labels = [str(i + 1) for i in range(n)] if digits else list("ABCDE"[:n])
    return {"id": f"q{rng.randrange(10 ** 6)}", stem: _words(rng) + "?",
            "choices": {"text": [_words(rng, 1, 3) for _ in range(n)], "label": labels},
            "answerKey": rng.choice(labels)}


def make_doc(task: str, rng: random.Random) -> dict:
    """A well-formed document of ``task`` in its published layout, with random text and gold."""
    if task in ("arc_easy", "arc_challenge"):
        return _arc(rng, "question", digits=rng.random() < 0.3)
    if task == "openbookqa":
        return _arc(rng, "question_stem")
    if task == "boolq":
        return {"question": _words(rng), "passage": _words(rng, 8, 20) + ".", "idx": rng.randrange(999),
                "label": rng.randrange(2)}
    if task == "copa":
        return {"premise": _words(rng).capitalize() + ".", "choice1": _words(rng).capitalize() + ".",
                "choice2": _words(rng).capitalize() + ".", "question": rng.choice(["cause", "effect"]),
                "idx": rng.randrange(999), "label": rng.randrange(2)}
    if task == "hellaswag":
        n = rng.randint(3, 4)
        return {"activity_label": _words(rng, 1, 2).title(), "ctx_a": _words(rng) + ".",
                "ctx_b": rng.choice(["", _words(rng, 1, 2)]), "endings": [_words(rng) + "." for _ in range(n)],
                "label": str(rng.randrange(n)), "source_id": "test~1"}
    if task == "lambada_openai":
        return {"text": _words(rng, 6, 14)}
    if task == "piqa":
        return {"goal": _words(rng), "sol1": _words(rng), "sol2": _words(rng), "label": rng.randrange(2)}
    if task == "sciq":
        return {"support": rng.choice(["", _words(rng, 5, 12) + "."]), "question": _words(rng) + "?",
                **{f"distractor{i}": _words(rng, 1, 2) for i in (1, 2, 3)}, "correct_answer": _words(rng, 1, 2)}
    if task == "winogrande":
        a, b = rng.sample(WORDS, 2)
        return {"sentence": f"{_words(rng)} because _ {_words(rng)}.", "option1": a, "option2": b,
                "answer": rng.choice(["1", "2"])}
    raise AssertionError(task)


FILE_TASKS = tuple(benchmarks.TEN_BENCHMARKS)


def write_split(data_dir, task: str, split: str, records, blank_after: int = -1) -> str:
    """``records`` as ``<data_dir>/<task>/<split>.jsonl`` (a blank line after record ``blank_after``)."""
    path = os.path.join(str(data_dir), task, f"{split}.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for i, r in enumerate(records):
            f.write(json.dumps(r) + "\n" + ("\n" if i == blank_after else ""))
    return path


def _set(doc: dict, field: str, value) -> dict:
    """A copy of ``doc`` with dotted ``field`` set to ``value``."""
    doc = json.loads(json.dumps(doc))
    *parents, last = field.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value
    return doc


@pytest.mark.parametrize("task", FILE_TASKS)
def test_a_valid_split_loads_for_every_task(task, tmp_path):
    rng = random.Random(f"valid:{task}")
    docs = [make_doc(task, rng) for _ in range(rng.randint(5, 12))]
    t = ZERO_SHOT_TASKS.get(task)
    write_split(tmp_path, task, t.eval_split, docs, blank_after=2)
    loaded = t.load(str(tmp_path), t.eval_split)
    assert loaded == docs
    examples = build_examples(t, loaded)
    assert len(examples) == len(docs)
    if t.format.kind != "loglikelihood":
        assert all(0 <= ex.gold < len(ex.requests) for ex in examples)
        assert len({ex.gold for ex in examples}) > (task != "sciq")  # the random golds vary (SciQ's is always 3)


def test_every_task_has_a_schema():
    assert all(schema(name) for name in ZERO_SHOT_TASKS.names())


# (task, field, bad value, phrase of what is wanted): each the only bad record of a random file
BAD = [
    # label out of range
    ("piqa", "label", 5, "is 5, but there are 2 choices (0 or 1)"),
    ("piqa", "label", -1, "is -1, but there are 2 choices (0 or 1)"),
    ("boolq", "label", 2, "is 2, but there are 2 choices (0 or 1)"),
    ("copa", "label", 7, "is 7, but there are 2 choices (0 or 1)"),
    ("hellaswag", "label", "9", "is \"9\", but there are"),
    ("winogrande", "answer", "3", "is \"3\", but there are 2 options (1 or 2)"),
    ("winogrande", "answer", 0, "is 0, but there are 2 options (1 or 2)"),
    # label of the wrong type
    ("piqa", "label", "x", "is \"x\", but it must be the right choice's number, an integer (0 or 1)"),
    ("boolq", "label", True, "is true, but it must be the right choice's number"),
    ("copa", "label", 0.5, "is 0.5, but it must be the right choice's number"),
    ("hellaswag", "label", None, "is null, but it must be the right ending's number"),
    ("winogrande", "answer", "", "is \"\", but it must be the right option's number, an integer (1 or 2)"),
    # ARC / OpenBookQA: the answer key among the labels
    ("arc_easy", "answerKey", "Z", "is \"Z\", but it must be one of the choice labels"),
    ("arc_challenge", "answerKey", None, "is null, but it must be one of the choice labels"),
    ("openbookqa", "answerKey", "", "is \"\", but it must be one of the choice labels"),
    ("arc_easy", "choices.label", ["A", "A", "B"], "is [\"A\", \"A\", \"B\"], but the labels must be distinct"),
    # missing, null or empty text
    ("piqa", "goal", None, "is null, but it must be non-empty text"),
    ("piqa", "sol2", "", "is \"\", but it must be non-empty text"),
    ("boolq", "passage", "   ", "is \"   \", but it must be non-empty text"),
    ("boolq", "question", 17, "is 17, but it must be non-empty text"),
    ("copa", "premise", None, "is null, but it must be non-empty text"),
    ("copa", "choice2", "", "is \"\", but it must be non-empty text"),
    ("copa", "question", "why", "is \"why\", but it must be \"cause\" or \"effect\""),
    ("hellaswag", "activity_label", None, "is null, but it must be non-empty text"),
    ("hellaswag", "ctx_b", None, "is null, but it must be text (a string)"),
    ("lambada_openai", "text", None, "is null, but it must be non-empty text"),
    ("lambada_openai", "text", "lonely", "is \"lonely\", but it must be a passage whose last word"),
    ("openbookqa", "question_stem", "", "is \"\", but it must be non-empty text"),
    ("arc_challenge", "question", None, "is null, but it must be non-empty text"),
    ("sciq", "question", None, "is null, but it must be non-empty text"),
    ("sciq", "distractor2", "", "is \"\", but it must be non-empty text"),
    ("sciq", "support", None, "is null, but it must be text (a string)"),
    ("winogrande", "sentence", "no blank here.", "but it must be a sentence with a '_' blank"),
    ("winogrande", "option1", None, "is null, but it must be non-empty text"),
    # empty or malformed choices
    ("arc_easy", "choices.text", [], "is [], but it must be a non-empty list of non-empty strings"),
    ("openbookqa", "choices.text", ["a", None, "c", "d"], "item 1 is null, but every choice must be non-empty text"),
    ("hellaswag", "endings", [], "is [], but it must be a non-empty list of non-empty strings"),
    ("hellaswag", "endings", "one ending", "but it must be a non-empty list of non-empty strings"),
    ("arc_challenge", "choices", None, "field 'choices' is null, but it must be an object with a field 'text'"),
]


def _bad_file(tmp_path, task, field, value, seed):
    """A random split of ``task`` whose record at a random position has ``field`` = ``value``;
    returns (its path, the 1-based line of the bad record)."""
    rng = random.Random(f"bad:{seed}")
    docs = [make_doc(task, rng) for _ in range(rng.randint(4, 9))]
    k = rng.randrange(len(docs))
    if field == "choices.label":  # as many labels as choices, so only the duplicate is wrong
        docs[k]["choices"]["text"] = docs[k]["choices"]["text"][:len(value)]
    docs[k] = _set(docs[k], field, value)
    blank = rng.randrange(len(docs))  # a blank line: line numbers are the file's own
    path = write_split(tmp_path, task, ZERO_SHOT_TASKS.get(task).eval_split, docs, blank_after=blank)
    return path, k + 1 + (k > blank)


@pytest.mark.parametrize("case", BAD, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(BAD)])
def test_a_bad_record_is_one_line_naming_file_line_and_field(case, tmp_path):
    task, field, value, wanted = case
    path, line = _bad_file(tmp_path, task, field, value, case)
    t = ZERO_SHOT_TASKS.get(task)
    with pytest.raises(RecordError) as e:
        t.load(str(tmp_path), t.eval_split)
    msg = str(e.value)
    assert msg.startswith(f"{path} line {line}: field '{field}' "), msg
    assert wanted in msg and msg.endswith("; fix or remove that record") and "\n" not in msg, msg
    assert isinstance(e.value, UserError) and isinstance(e.value, TaskError)
    assert f"{task}/{t.eval_split}.jsonl line {line}" in msg


def test_a_missing_field_is_named_with_the_fields_there(tmp_path):
    rng = random.Random(3)
    docs = [make_doc("piqa", rng) for _ in range(4)]
    del docs[2]["goal"]
    path = write_split(tmp_path, "piqa", "validation", docs)
    with pytest.raises(RecordError) as e:
        ZERO_SHOT_TASKS.get("piqa").load(str(tmp_path), "validation")
    assert str(e.value) == (f"{path} line 3: the record has no field 'goal' (it has label, sol1, sol2); the piqa "
                            "layout needs goal, sol1, sol2, label; fix or remove that record")
    docs = [make_doc("arc_easy", rng) for _ in range(3)]
    del docs[0]["choices"]["label"]
    write_split(tmp_path, "arc_easy", "test", docs)
    with pytest.raises(RecordError, match=r"arc_easy/test.jsonl line 1: field 'choices' has no field 'label' "
                                          r"\(it has text\)"):
        ZERO_SHOT_TASKS.get("arc_easy").load(str(tmp_path), "test")


def test_the_first_bad_record_is_named_and_the_others_counted(tmp_path):
    rng = random.Random(5)
    docs = [make_doc("boolq", rng) for _ in range(10)]
    for i in (3, 6, 8):
        docs[i]["label"] = rng.choice([2, 3, -4])
    write_split(tmp_path, "boolq", "validation", docs)
    with pytest.raises(RecordError, match=r"validation.jsonl line 4: field 'label' is -?\d, but there are 2 choices "
                                          r"\(0 or 1\); fix or remove that record \(2 more records of this split "
                                          r"fail these checks\)$"):
        ZERO_SHOT_TASKS.get("boolq").load(str(tmp_path), "validation")


def test_parquet_shards_name_the_shard_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = random.Random(7)
    docs = [make_doc("hellaswag", rng) for _ in range(6)]
    docs[4]["endings"] = [docs[4]["endings"][0], ""]
    docs[4]["label"] = "0"
    os.makedirs(tmp_path / "hellaswag")
    for i, part in enumerate((docs[:3], docs[3:])):
        pq.write_table(pa.Table.from_pylist(part), tmp_path / "hellaswag" / f"validation-0000{i}-of-00002.parquet")
    with pytest.raises(RecordError) as e:
        ZERO_SHOT_TASKS.get("hellaswag").load(str(tmp_path), "validation")
    assert str(e.value).startswith(f"{tmp_path}/hellaswag/validation-00001-of-00002.parquet row 2: field 'endings' "
                                   "item 1 is \"\", but every choice must be non-empty text")


def test_what_the_prompt_format_makes_is_checked_too(tmp_path):
    # a HellaSwag ending that is only markup is empty once lm-eval's cleaning removes it
    rng = random.Random(11)
    docs = [make_doc("hellaswag", rng) for _ in range(3)]
    docs[1]["endings"][-1] = "[title]"
    write_split(tmp_path, "hellaswag", "validation", docs)
    with pytest.raises(RecordError, match=r"validation.jsonl line 2: choice \d is \"\" in the prompt, but every "
                                          "choice must be non-empty text; fix or remove that record$"):
        ZERO_SHOT_TASKS.get("hellaswag").load(str(tmp_path), "validation")


def test_a_bad_fewshot_split_is_named(tmp_path):
    rng = random.Random(13)
    write_split(tmp_path, "copa", "validation", [make_doc("copa", rng) for _ in range(4)])
    shots = [make_doc("copa", rng) for _ in range(5)]
    shots[4]["label"] = "second"
    write_split(tmp_path, "copa", "train", shots)
    assert len(task_examples(ZERO_SHOT_TASKS.get("copa"), str(tmp_path))) == 4  # zero-shot does not read train
    with pytest.raises(RecordError, match="copa/train.jsonl line 5: field 'label' is \"second\""):
        task_examples(ZERO_SHOT_TASKS.get("copa"), str(tmp_path), num_fewshot=2)


class CountingScorer:
    """Prefers the shortest continuation; counts what it is asked to tokenise and score."""
    max_length = 64

    def __init__(self):
        self.calls = 0

    def rows(self, requests):
        self.calls += 1
        return [cont for _, cont in requests]

    def score_rows(self, rows):
        self.calls += 1
        return [(-float(len(c)), False) for c in rows]


def test_run_tasks_scores_and_writes_nothing_when_any_task_has_a_bad_record(tmp_path):
    rng = random.Random(17)
    data, out = tmp_path / "data", tmp_path / "eval"
    write_split(data, "piqa", "validation", [make_doc("piqa", rng) for _ in range(5)])
    arc = [make_doc("arc_easy", rng) for _ in range(5)]
    arc[3]["answerKey"] = "Q"
    write_split(data, "arc_easy", "test", arc)
    scorer = CountingScorer()
    with pytest.raises(RecordError, match="arc_easy/test.jsonl line 4: field 'answerKey' is \"Q\""):
        run_tasks(scorer, "piqa,arc_easy", data_dir=str(data), out_dir=str(out), log=None)
    assert scorer.calls == 0 and not out.exists()
    arc[3]["answerKey"] = arc[3]["choices"]["label"][-1]
    write_split(data, "arc_easy", "test", arc)
    summary = run_tasks(scorer, "piqa,arc_easy", data_dir=str(data), out_dir=str(out), log=None)
    assert set(summary) == {"zero_shot/piqa", "zero_shot/arc_easy", "zero_shot_avg"} and scorer.calls == 4
    assert sorted(os.listdir(out)) == ["arc_easy.json", "piqa.json"]


def test_check_documents_names_a_source_and_record_index():
    rng = random.Random(19)
    docs = [make_doc("winogrande", rng) for _ in range(4)]
    check_documents("winogrande", docs, lambda i: f"somewhere record index {i}")
    docs[2]["answer"] = 2.0
    with pytest.raises(RecordError, match=r"^somewhere record index 2: field 'answer' is 2.0, but it must be the "
                                          r"right option's number, an integer \(1 or 2\); do this$"):
        check_documents("winogrande", docs, lambda i: f"somewhere record index {i}", fix="do this")
    with pytest.raises(RecordError, match="record index 0: is \\[1, 2\\], not an object"):
        check_documents("piqa", [[1, 2]], lambda i: f"record index {i}")


def test_tfds_records_are_checked_after_conversion(tmp_path, monkeypatch):
    """An unlabelled TFDS record (ClassLabel -1, as TFDS keeps for test splits) cannot be scored."""
    tfds = pytest.importorskip("tensorflow_datasets")
    records = {
        "piqa": [{"goal": b"open a jar", "sol1": b"twist the lid", "sol2": b"eat the lid", "label": np.int64(1)},
                 {"goal": b"dry a phone", "sol1": b"use rice", "sol2": b"use water", "label": np.int64(-1)}],
        "ai2_arc/ARC-Easy": [{"id": b"a", "question": b"Which is a gas?", "answerKey": np.int64(-1),
                              "choices": {"label": np.arange(3), "text": [b"ice", b"steam", b"rock"]}}],
    }

    class Prepared:
        info = type("Info", (), {"splits": {"validation": None, "test": None}})()

        def is_prepared(self):
            return True

    monkeypatch.setattr(tfds, "builder", lambda name, data_dir: Prepared())
    monkeypatch.setattr(tfds, "data_source", lambda name, **kw: records[name])
    with pytest.raises(RecordError) as e:
        ZERO_SHOT_TASKS.get("piqa").load(f"tfds:{tmp_path}", "validation")
    msg = str(e.value)
    assert msg.startswith(f"piqa: TFDS 'piqa' split 'validation' in {tmp_path}, record index 1: field 'label' is -1, "
                          "but there are 2 choices (0 or 1); that split cannot be scored as it is; rebuild it with "
                          "`tfds build piqa"), msg
    assert "\n" not in msg
    with pytest.raises(RecordError, match=r"record index 0: field 'answerKey' is \"\", but it must be one of the "
                                          r"choice labels A, B, C"):
        ZERO_SHOT_TASKS.get("arc_easy").load(f"tfds:{tmp_path}", "test")


def test_builtin_documents_are_checked(monkeypatch):
    def broken(rng, tokenizer, max_length):
        choices = [str(rng.randrange(1000, 9999)) for _ in range(4)]
        return {"text": "Question: What is river?\nAnswer:", "choices": choices, "gold": 4}

    monkeypatch.setattr(builtin, "_longctx_doc", broken)
    with pytest.raises(RecordError, match=r"^longctx_mc \(built-in, split 'test'\) record index 0: field 'gold' is 4, "
                                          r"but there are 4 choices \(0 to 3\); .*report it"):
        ZERO_SHOT_TASKS.get("longctx_mc").load(BuiltinSource(None, None, 128), "test")


# ---- through the CLI: exit 2, one line, no traceback, nothing written ----

CLI_BAD = [  # (task, field, value, phrase)
    ("piqa", "label", 5, "is 5, but there are 2 choices (0 or 1)"),
    ("piqa", "goal", None, "is null, but it must be non-empty text"),
    ("hellaswag", "label", "x", "is \"x\", but it must be the right ending's number"),
    ("arc_easy", "answerKey", "F", "is \"F\", but it must be one of the choice labels"),
    ("winogrande", "sentence", "", "is \"\", but it must be non-empty text"),
    ("openbookqa", "choices.text", [], "is [], but it must be a non-empty list"),
    ("sciq", "correct_answer", None, "is null, but it must be non-empty text"),
    ("lambada_openai", "text", "", "is \"\", but it must be non-empty text"),
    ("boolq", "label", "yes", "is \"yes\", but it must be the right choice's number"),
    ("copa", "choice1", [], "is [], but it must be non-empty text"),
    ("arc_challenge", "choices.text", ["a", "b", "c", ""], "item 3 is \"\""),
]


def _results(wd):
    return sorted(os.path.join(d, f) for d in ("eval", "eval_folded") if os.path.isdir(os.path.join(wd, d))
                  for f in os.listdir(os.path.join(wd, d)))


def test_cli_refuses_a_bad_task_file_in_one_line_and_writes_nothing(tiny_config, tmp_path, capsys):
    wd = str(tmp_path / "run")
    overrides = {"data.name": "facts", "data.facts_entities": 40, "train.steps": 2, "train.warmup_steps": 1,
                 "train.ckpt_every": 2, "train.eval_every": 2, "train.eval_batches": 1}
    train_and_evaluate(tiny_config(**overrides), wd)  # 2 steps of the tiny model: a checkpoint to evaluate
    for i, (task, field, value, wanted) in enumerate(CLI_BAD):
        data = tmp_path / f"tasks{i}"
        rng = random.Random(f"cli:{i}")
        write_split(data, "piqa", "validation", [make_doc("piqa", rng) for _ in range(3)])  # a good task first
        path, line = _bad_file(data, task, field, value, ("cli", i))
        capsys.readouterr()
        assert main(["eval", "--workdir", wd, "--tasks", f"piqa,{task}", "--data-dir", str(data)]) == 2
        out, err = capsys.readouterr()
        err = err.strip()
        assert err.startswith("edge-jax: error: ") and "\n" not in err and "Traceback" not in out + err, err
        assert f"{path} line {line}: field '{field}' " in err, err
        assert wanted in err and "fix or remove that record" in err, err
        assert "zero_shot_avg" not in out and _results(wd) == [], (out, _results(wd))
    # the same task files, fixed, are scored
    data = tmp_path / "good"
    rng = random.Random("cli:good")
    write_split(data, "piqa", "validation", [make_doc("piqa", rng) for _ in range(3)])
    assert main(["eval", "--workdir", wd, "--tasks", "piqa", "--data-dir", str(data), "--max-length", "128"]) == 0
    assert _results(wd) == [os.path.join("eval", "piqa.json")]
