"""Built-in TFDS builders (prepare + read without TensorFlow) and name resolution."""
import os
import re
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from edge_jax.data import DataError, resolve
from edge_jax.data.builders import facts, pystdlib
from edge_jax.data.builders import longctx_tasks as longctx
from edge_jax.data.sources import PYSTDLIB_MAX_FILES_ENV


def test_facts_generate_is_pure_and_well_formed():
    a, b = facts.generate(40, seed=0), facts.generate(40, seed=0)
    assert a == b
    assert a != facts.generate(40, seed=1)
    people = facts.make_people(40, 0)
    assert len({p["name"] for p in people}) == 40
    assert len(a["train"]) == 40 * facts.BIOS_PER_PERSON + 20 * len(facts.ATTRIBUTES)
    assert len(a["validation"]) == 4 and len(a["qa"]) == 20 * len(facts.ATTRIBUTES)
    train_text = "\n".join(r["text"] for r in a["train"])
    for q in a["qa"]:
        person = next(p for p in people if p["name"] in q["prompt"])
        assert people.index(person) >= 20  # not QA-trained ...
        assert person["name"] in train_text  # ... but its facts are in training
        assert q["answer"] == person[q["task"].split("/")[1]]
        assert q["prompt"].startswith("Question: ") and q["prompt"].endswith("\nAnswer:")
        question = q["prompt"][len("Question: "):-len("\nAnswer:")]
        assert question not in train_text  # held-out question wording
    for r in a["train"]:
        if r["task"] != "bio":
            assert r["text"] == f"{r['prompt']} {r['answer']}"


def test_facts_builder_prepares_and_reads(tmp_path):
    source = resolve("facts", str(tmp_path), facts_entities=30)
    train = source.documents("train")
    assert train == [r["text"] for r in facts.generate(30, 0)["train"]]  # order preserved
    assert os.path.isdir(tmp_path / "tfds" / "edge_facts" / "n30_s0" / "1.0.0")
    assert not [p for p in os.listdir(tmp_path / "tfds" / "edge_facts" / "n30_s0")
                if p.startswith("incomplete")]
    qa = source.qa()
    assert len(qa) == 15 * 6 and set(qa[0]) == {"prompt", "answer", "task"}
    assert len(source.documents("validation")) == 3
    # A second data dir gives exactly the same split (determinism across preparations).
    assert resolve("facts", str(tmp_path / "b"), facts_entities=30).documents("train") == train


def test_longctx_builder_tasks(tmp_path):
    source = resolve("longctx", str(tmp_path), longctx_length=600, longctx_examples=12)
    assert source.key == "longctx-len600_n12_s0-v1.2.0"
    records = source.records("train")
    assert len(records) == 12 and len(source.records("validation")) == 3
    assert len(longctx.TASKS) == 5 and set(longctx.CATEGORIES) == set(longctx.TASKS)
    # train and validation: documents of exactly 600 characters (their examples checked in test_longctx_tasks)
    for r in records + source.records("validation"):
        assert len(r["text"]) == 600 and r["text"].startswith(f"{r['prompt']} {r['answer']}")
    qa = source.records("qa")
    assert [r["task"] for r in qa[:5]] == list(longctx.TASKS)
    for r in qa:
        assert set(r) == {"text", "prompt", "answer", "task"}
        assert r["text"] == f"{r['prompt']} {r['answer']}"
        assert 550 <= len(r["prompt"]) <= 600, len(r["prompt"])
        assert r["prompt"].endswith("\nAnswer:")
        assert r["answer"] and not re.search(r"\s", r["answer"])
        if r["task"] == "passkey":
            assert f"The pass key is {r['answer']}." in r["prompt"]
        elif r["task"] == "multikey":
            key = re.search(r"value of key (\S+)\?", r["prompt"]).group(1)
            assert f"The value of key {key} is {r['answer']}." in r["prompt"]
        elif r["task"] == "aggregate":
            points = [int(v) for v in re.findall(r"Tally note: add (\d) points", r["prompt"])]
            assert 4 <= len(points) <= 8 and sum(points) == int(r["answer"])
        elif r["task"] == "fewshot":
            assert 4 <= len(re.findall(r"Example: [a-z]+ -> [a-z]+\.", r["prompt"])) <= 8
            assert re.fullmatch(r"[a-z]{3,5}", r["answer"])
        else:
            assert r["task"] == "vartrack"
            assert f"= {r['answer']} ." in r["prompt"] and re.fullmatch(r"\d{5}", r["answer"])
    assert len(source.qa()) == 6
    assert {q["task"] for q in source.qa()} == set(longctx.TASKS)
    assert resolve("longctx", str(tmp_path / "b"), longctx_length=600,
                   longctx_examples=12).records("train") == records


def test_pystdlib_file_selection():
    files = pystdlib.select_files()
    train, val = set(files["train"]), set(files["validation"])
    assert not train & val and len(train) > 300 and 3 <= len(val) <= len(train) // 20
    assert all(pystdlib.split_of(r) == "validation" for r in val)
    for rel in train | val:
        parts = rel.split("/")
        assert not {"test", "tests", "idle_test"} & set(parts[:-1]), rel
        assert not rel.startswith(("site-packages", "_sysconfigdata"))
    assert "os.py" in train | val and "encodings/cp1252.py" not in train | val
    config = pystdlib.make_config()
    v = sys.version_info
    assert f"{v.major}_{v.minor}_{v.micro}" in config.name


def test_pystdlib_builder_small(tmp_path, monkeypatch):
    monkeypatch.setenv(PYSTDLIB_MAX_FILES_ENV, "12")
    source = resolve("pystdlib", str(tmp_path))
    assert source.key.endswith("_max12-v1.0.0")
    with pytest.raises(DataError):
        source.qa()
    train, val = source.records("train"), source.records("validation")
    assert len(train) == 11 and len(val) == 1
    selected = pystdlib.select_files(12)
    root = pystdlib.stdlib_root()
    assert train[0]["text"] == pystdlib.read_source(root / selected["train"][0])
    assert resolve("pystdlib", str(tmp_path / "b")).documents("validation") == [val[0]["text"]]


class EdgeTestCorpus(tfds.core.GeneratorBasedBuilder):
    """A tiny builder standing in for 'any prepared TFDS dataset'."""

    VERSION = tfds.core.Version("0.1.0")
    FAIL_AT = -1

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"body": tfds.features.Text(), "label": tfds.features.Scalar(dtype=np.int64)}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(40), "test": self._generate_examples(5)}

    def _generate_examples(self, n):
        for i in range(n):
            if i == self.FAIL_AT:
                raise KeyboardInterrupt("simulated interruption")
            yield i, {"body": f"document number {i}", "label": i}


def test_tfds_prepared_dataset_and_interruption(tmp_path):
    tfds_dir = str(tmp_path / "tfds")
    EdgeTestCorpus.FAIL_AT = 30
    with pytest.raises(KeyboardInterrupt):
        EdgeTestCorpus(data_dir=tfds_dir, file_format="array_record").download_and_prepare()
    with pytest.raises(DataError, match="not prepared"):  # nothing half-written is picked up
        resolve("tfds:edge_test_corpus", str(tmp_path), text_key="body")
    EdgeTestCorpus.FAIL_AT = -1
    EdgeTestCorpus(data_dir=tfds_dir, file_format="array_record").download_and_prepare()
    source = resolve("tfds:edge_test_corpus", str(tmp_path), text_key="body")
    assert source.splits == ("test", "train")
    assert sorted(source.documents("train")) == sorted(f"document number {i}" for i in range(40))
    with pytest.raises(DataError, match="data.text_key"):
        resolve("tfds:edge_test_corpus", str(tmp_path))
    with pytest.raises(DataError, match="no split 'validation'"):
        source.documents("validation")


def test_tfds_missing_dataset(tmp_path):
    with pytest.raises(DataError) as err:
        resolve("tfds:wikitext_nope", str(tmp_path))
    assert "tfds build wikitext_nope" in str(err.value) and "\n" not in str(err.value)


def test_text_glob_split(tmp_path):
    for i in range(120):
        (tmp_path / f"f{i:03d}.txt").write_text(f"file {i}\n" * 3)
    source = resolve(f"text:{tmp_path}/*.txt")
    train, val = source.documents("train"), source.documents("validation")
    assert len(train) + len(val) == 120 and 0 < len(val) < 12
    assert source.documents("validation") == val
    single = tmp_path / "one" / "book.txt"
    single.parent.mkdir()
    single.write_text("".join(f"line {i}\n" for i in range(200)))
    one = resolve(f"text:{single}")
    assert one.documents("train")[0] + one.documents("validation")[0] == single.read_text()
    assert one.documents("validation")[0].startswith("line 19")
    with pytest.raises(DataError, match="matches no files"):
        resolve(f"text:{tmp_path}/*.nothing")


def test_combined_and_unknown(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n" * 50)
    both = resolve(f"facts+text:{tmp_path}/a.txt", str(tmp_path), facts_entities=10)
    alone = resolve("facts", str(tmp_path), facts_entities=10)
    fact_docs = alone.documents("train")
    assert both.documents("train")[:len(fact_docs)] == fact_docs
    assert both.documents("train")[-1].startswith("alpha")
    assert both.documents("validation") == alone.documents("validation")
    assert len(both.qa()) == 5 * 6
    with pytest.raises(DataError) as err:
        resolve("pystdlb", str(tmp_path))
    msg = str(err.value)
    assert "did you mean 'pystdlib'" in msg and "tfds:<name>" in msg and "\n" not in msg


def test_no_tensorflow_imported():
    assert "tensorflow" not in sys.modules
