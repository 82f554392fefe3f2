"""The ten MeKi benchmarks read from TFDS (edge_jax.eval.tfds_tasks): each converter turns a record
shaped as ``tfds.data_source`` returns it into the published (Hugging Face) layout and gives the same
lm-eval requests as the published record; ``read_tfds`` end to end on real array_record datasets
prepared here by the TFDS 4.9.10 builders from tiny local files (downloads mocked, no network); and
its one-line errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import edge_jax.eval.benchmarks  # noqa: F401  (registers the ten tasks)
from edge_jax.eval import tfds_tasks
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, TaskError, build_examples
from edge_jax.eval.tfds_tasks import DEVIATIONS, TFDS_TASKS, read_tfds

i64 = np.int64

ARC_E = {"id": "NYSEDREGENTS_2015_4_8", "question": "Which is a renewable resource?",
         "choices": {"text": ["coal", "oil", "wind", "natural gas"], "label": ["1", "2", "3", "4"]}, "answerKey": "3"}
ARC_C = {"id": "Mercury_7", "question": "Which gas do plants take in?",
         "choices": {"text": ["oxygen", "helium", "neon", "argon", "carbon dioxide"], "label": list("ABCDE")},
         "answerKey": "E"}
BOOLQ = {"question": "is the sky blue", "passage": "The sky is blue on clear days.", "idx": 7, "label": 1}
COPA = {"premise": "The man turned on the faucet.", "choice1": "The toilet filled with water.",
        "choice2": "Water flowed from the spout.", "question": "effect", "idx": 0, "label": 1}
HS_ACT = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
          "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": "3",
          "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                      "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
          "source_id": "activitynet~v_-JhWjGDPHMY"}
_WH = ("[header] How to make a liquid into a solid [title] Place a small open container of water in the freezer. "
       "[title] Remove from the freezer and note what has occurred.")
HS_WIKI = {"ind": 39, "activity_label": "Education and Communications", "ctx_a": _WH, "ctx_b": "", "ctx": _WH,
           "split": "val", "split_type": "zeroshot", "label": "1",
           "endings": ["[title] Pour it out.", "[title] Observe the ice. [step] The water is now solid.",
                       "Boil it again.", "Paint the freezer."], "source_id": "wikihow~66"}
OBQA = {"id": "7-980", "question_stem": "The sun is responsible for",
        "choices": {"text": ["puppies learning new tricks", "children growing up and getting old",
                             "flowers wilting in a vase", "plants sprouting, blooming and wilting"],
                    "label": list("ABCD")}, "answerKey": "D"}
PIQA = {"goal": "How do I dry a wet phone?", "sol1": "Put it in a bag of rice overnight.",
        "sol2": "Put it in a bag of water overnight.", "label": 0}
WINO = {"sentence": "Sarah was a much better surgeon than Maria so _ always got the easier cases.",
        "option1": "Sarah", "option2": "Maria", "answer": "2"}


def _text(d):
    return {k: v.encode() for k, v in d.items()}


# (case id, task, TFDS record as data_source returns it, published (HF) doc, converted doc, gold answer text)
CASES = [
    ("arc_easy", "arc_easy", {"id": ARC_E["id"].encode(), "question": ARC_E["question"].encode(),
                              "choices": {"label": [i64(0), i64(1), i64(2), i64(3)],
                                          "text": [t.encode() for t in ARC_E["choices"]["text"]]}, "answerKey": 2},
     ARC_E, {**ARC_E, "choices": {"text": ARC_E["choices"]["text"], "label": list("ABCD")}, "answerKey": "C"}, "wind"),
    ("arc_challenge", "arc_challenge",
     {"id": b"Mercury_7", "question": ARC_C["question"].encode(), "answerKey": 4,
      "choices": {"label": np.arange(5), "text": np.array([t.encode() for t in ARC_C["choices"]["text"]], object)}},
     ARC_C, ARC_C, "carbon dioxide"),
    ("boolq", "boolq", {**_text({k: BOOLQ[k] for k in ("question", "passage")}), "idx": np.int32(7), "label": 1},
     BOOLQ, BOOLQ, "yes"),
    ("copa", "copa", {**_text({k: COPA[k] for k in ("premise", "choice1", "choice2", "question")}),
                      "idx": np.int32(0), "label": 1}, COPA, COPA, "water flowed from the spout."),
    ("hellaswag_activitynet", "hellaswag",
     {"context": HS_ACT["ctx"].encode(), "endings": [e.encode() for e in HS_ACT["endings"]],
      "activity_label": HS_ACT["activity_label"].encode(), "label": np.int32(3), "split_type": b"indomain",
      "source_id": HS_ACT["source_id"].encode()},
     HS_ACT, {k: v for k, v in HS_ACT.items() if k not in ("ind", "split")}, "starts pulling up roofing on a roof."),
    ("hellaswag_wikihow", "hellaswag",
     {"context": _WH.encode(), "endings": np.array([e.encode() for e in HS_WIKI["endings"]], object),
      "activity_label": HS_WIKI["activity_label"].encode(), "label": np.int32(1), "split_type": b"zeroshot",
      "source_id": b"wikihow~66"},
     HS_WIKI, {k: v for k, v in HS_WIKI.items() if k not in ("ind", "split")},
     "Observe the ice. The water is now solid."),
    ("openbookqa", "openbookqa",
     {"question": {"stem": OBQA["question_stem"].encode(),
                   **{f"choice_{c}": t.encode() for c, t in zip("ABCD", OBQA["choices"]["text"])}},
      "fact1": b"the sun is the source of energy", "humanScore": np.float32(1.0), "clarity": np.float32(2.0),
      "turkIdAnonymized": b"b356d338b7", "answerKey": 3},
     OBQA, {**{k: v for k, v in OBQA.items() if k != "id"}, "fact1": "the sun is the source of energy"},
     "plants sprouting, blooming and wilting"),
    ("piqa", "piqa", {"id": b"p0", **_text({k: PIQA[k] for k in ("goal", "sol1", "sol2")}), "label": 0},
     PIQA, PIQA, PIQA["sol1"]),
    ("winogrande", "winogrande", {**_text({k: WINO[k] for k in ("sentence", "option1", "option2")}), "label": 1},
     WINO, WINO, "Sarah was a much better surgeon than Maria so Maria"),
]


def _gold_text(task, doc):
    fmt = task.format
    return fmt.target(doc) if fmt.kind == "loglikelihood" else fmt.choices(doc)[fmt.gold(doc)]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_gives_published_layout_and_requests(case):
    _, name, record, published, expected, gold = case
    doc = TFDS_TASKS[name][2](record)
    assert doc == expected
    assert all(type(v) is type(published[k]) for k, v in doc.items() if k in published)
    task = ZERO_SHOT_TASKS.get(name)
    assert build_examples(task, [doc]) == build_examples(task, [published])
    assert _gold_text(task, doc).strip() == gold


def test_hellaswag_query_rebuilds_capitalised_ctx_b():
    doc = TFDS_TASKS["hellaswag"][2](CASES[4][2])
    (ex,) = build_examples(ZERO_SHOT_TASKS.get("hellaswag"), [doc])
    assert ex.requests[3] == ("Roof shingle removal: A man is sitting on a roof. He",
                              " starts pulling up roofing on a roof.")
    ended = TFDS_TASKS["hellaswag"][2]({**CASES[4][2], "context": b"A man waves. He smiles."})
    assert (ended["ctx_a"], ended["ctx_b"]) == ("A man waves. He smiles.", "")


def test_tables_cover_the_ten_tasks():
    assert set(TFDS_TASKS) | set(tfds_tasks.NOT_IN_TFDS) == set(edge_jax.eval.benchmarks.TEN_BENCHMARKS)
    assert set(DEVIATIONS) <= set(TFDS_TASKS)
    for name, (_, splits, _) in TFDS_TASKS.items():
        task = ZERO_SHOT_TASKS.get(name)
        assert task.eval_split in splits and (task.fewshot_split is None or task.fewshot_split in splits)


def test_sciq_and_lambada_openai_are_not_read_from_tfds(tmp_path):
    with pytest.raises(TaskError, match=r"^sciq is not read from TFDS \(it is not in TFDS 4\.9\.10\); put its "
                                        "published files in a data dir"):
        read_tfds(str(tmp_path), "sciq", "test")
    with pytest.raises(TaskError, match=r"^lambada_openai is not read from TFDS \(TFDS's lambada is the original"):
        read_tfds(str(tmp_path), "lambada_openai", "test")
    with pytest.raises(TaskError, match="unknown TFDS task 'arc_eazy'; did you mean 'arc_easy'"):
        read_tfds(str(tmp_path), "arc_eazy", "test")


@pytest.mark.parametrize("name", ["piqa", "boolq"])  # boolq: super_glue's module needs TensorFlow to register
def test_not_prepared_names_the_build_command(tmp_path, name):
    builder = TFDS_TASKS[name][0]
    with pytest.raises(TaskError) as e:
        read_tfds(str(tmp_path), name, "validation")
    msg = str(e.value)
    assert "\n" not in msg and f"TFDS dataset '{builder}' is not prepared in {tmp_path}" in msg
    assert f"`tfds build {builder} --data_dir={tmp_path} --file_format=array_record`" in msg


def test_tfrecord_dataset_is_one_line(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    class Prepared:
        info = type("Info", (), {"splits": {"validation": None}})()

        def is_prepared(self):
            return True

    def no_random_access(*a, **k):
        raise NotImplementedError("tfrecord")

    monkeypatch.setattr(tfds, "builder", lambda name, data_dir: Prepared())
    monkeypatch.setattr(tfds, "data_source", no_random_access)
    with pytest.raises(TaskError, match="not in array_record format.*--file_format=array_record"):
        read_tfds(str(tmp_path), "piqa", "validation")


# ---- end to end: the real TFDS builders prepare array_record datasets from tiny published-format files ----

def _jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


HS_SPLIT_TYPES = ("indomain", "zeroshot")


def _write_raw(raw):
    """Every builder's download, in its published layout, all in one folder (their paths don't collide)."""
    for cfg, d in (("ARC-Easy", ARC_E), ("ARC-Challenge", ARC_C)):
        row = {"id": d["id"], "answerKey": d["answerKey"], "question": {"stem": d["question"], "choices": [
            {"text": t, "label": lab} for t, lab in zip(d["choices"]["text"], d["choices"]["label"])]}}
        for s in ("Train", "Dev", "Test"):
            _jsonl(f"{raw}/ARC-V1-Feb2018-2/{cfg}/{cfg}-{s}.jsonl", [row])
    for folder, d in (("BoolQ", {**BOOLQ, "label": bool(BOOLQ["label"])}), ("COPA", COPA)):
        for s in ("train", "val", "test"):
            _jsonl(f"{raw}/{folder}/{s}.jsonl", [d if s != "test" else {k: v for k, v in d.items() if k != "label"}])
    for s in ("train", "val", "test"):
        _jsonl(f"{raw}/hellaswag_{s}.jsonl", [{**d, "label": int(d["label"]), "split_type": t}  # every sub-split
                                               for d in (HS_ACT, HS_WIKI) for t in HS_SPLIT_TYPES])
    obqa = {"id": OBQA["id"], "question": {"stem": OBQA["question_stem"], "choices": [
        {"text": t, "label": lab} for t, lab in zip(OBQA["choices"]["text"], "ABCD")]},
        "fact1": "the sun is the source of energy", "humanScore": 1.0, "clarity": 2.0,
        "turkIdAnonymized": "b356d338b7", "answerKey": OBQA["answerKey"]}
    for s in ("train", "dev", "test"):
        _jsonl(f"{raw}/OpenBookQA-V1-Sep2018/Data/Additional/{s}_complete.jsonl", [obqa])
    for s in ("train", "dev"):
        _jsonl(f"{raw}/physicaliqa-train-dev/{s}.jsonl",
               [{"id": "p0", **{k: PIQA[k] for k in ("goal", "sol1", "sol2")}}])
        _jsonl(f"{raw}/physicaliqa-train-dev/{s}-labels.lst", [PIQA["label"]])
    wino = {k: WINO[k] for k in ("sentence", "option1", "option2", "answer")}
    for s in ("xs", "s", "m", "l", "xl", "dev"):  # train_xl has two records, the smaller ones one
        name = f"train_{s}" if s != "dev" else s
        _jsonl(f"{raw}/winogrande_1.1/{name}.jsonl", [{"qID": f"q{i}", **wino} for i in range(1 + (s == "xl"))])
    _jsonl(f"{raw}/winogrande_1.1/test.jsonl", [{"qID": "t0", **{k: v for k, v in wino.items() if k != "answer"}}])


# Runs in a fresh interpreter so that this process reads the datasets as a user without TensorFlow does
# (super_glue, hellaswag and winogrande live in tfds.text, which needs TensorFlow to import: their
# builders are loaded from their files here, and read back from the prepared files alone).
_PREPARE = r"""
import importlib.util, os, sys, types
from unittest import mock
import numpy as np
import tensorflow_datasets as tfds
raw, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
root = os.path.dirname(tfds.__file__)
for mod_name in ("super_glue", "hellaswag", "winogrande"):
    try:
        tfds.builder_cls(mod_name)
    except Exception:
        spec = importlib.util.spec_from_file_location("_tfds_" + mod_name, f"{root}/text/{mod_name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if importlib.util.find_spec("tensorflow") is None and hasattr(mod, "tf"):
            mod.tf = types.SimpleNamespace(int32=np.int32)
tfds.display_progress_bar(False)
fetch = lambda self, url: {k: f"{raw}/{os.path.basename(v)}" for k, v in url.items()} if isinstance(url, dict) else raw
with mock.patch.object(tfds.download.DownloadManager, "download_and_extract", new=fetch):
    for name in names:
        tfds.builder(name, data_dir=out, file_format="array_record").download_and_prepare()
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfds_tasks")
    _write_raw(str(root / "raw"))
    names = sorted({b for b, _, _ in TFDS_TASKS.values()})
    run = subprocess.run([sys.executable, "-c", _PREPARE, str(root / "raw"), str(root / "tfds"), *names],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return str(root / "tfds")


@pytest.mark.parametrize("name", list(TFDS_TASKS))
def test_read_tfds_end_to_end(prepared, name):
    task = ZERO_SHOT_TASKS.get(name)
    expected, golds = [c[4] for c in CASES if c[1] == name], [c[5] for c in CASES if c[1] == name]
    if name == "hellaswag":
        expected, golds = [{**e, "split_type": t} for e in expected for t in HS_SPLIT_TYPES], golds * 2
    docs = read_tfds(prepared, name, task.eval_split)
    assert sorted(docs, key=json.dumps) == sorted(expected, key=json.dumps)
    # through the task's own loader, as `edge-jax eval --data-dir tfds:<dir>` reads it
    loaded = task.load("tfds:" + prepared, task.eval_split)
    assert len(build_examples(task, loaded)) == len(docs)
    assert sorted(_gold_text(task, d).strip() for d in loaded) == sorted(golds)
    if task.fewshot_split:
        shots = read_tfds(prepared, name, task.fewshot_split)
        assert len(shots) == (2 if name == "winogrande" else len(expected))  # winogrande reads train_xl
        assert all(d in expected for d in shots)


def test_missing_split_names_the_ones_there(prepared):
    with pytest.raises(TaskError, match=r"^piqa: TFDS dataset 'piqa' in .* has no split 'test' \(it has train, "
                                        r"validation\); rebuild it with `tfds build piqa"):
        read_tfds(prepared, "piqa", "test")
