"""The training documents of `edge_longctx` (`make_document`) and its splits (pure Python, fast)."""
import random
import re

import pytest
from test_longctx_tasks import check_record

from edge_jax.data.builders import longctx_tasks as longctx
from edge_jax.data.builders import longctx_tfds
from edge_jax.data.builders.longctx_tasks import CATEGORIES, TASKS


def _examples(doc: str) -> list[str]:
    """The complete examples of a training document (split at the blank line before an instruction)."""
    starts = [m.start() for m in re.finditer("|".join(re.escape(i) for i in longctx.INSTRUCTIONS.values()), doc)]
    return [doc[a:b].rstrip("\n") for a, b in zip(starts, starts[1:] + [len(doc)])]


def _task_of(example: str) -> str:
    return next(t for t, head in longctx.INSTRUCTIONS.items() if example.startswith(head))


def check_drill(doc: str) -> None:
    """A drill document: pass keys and key-value lookups without instructions, every question answered
    by the latest statement before it; no key is stated twice."""
    assert not doc.startswith(tuple(longctx.INSTRUCTIONS.values()))
    keys = re.findall(r"The value of key (\S+) is \d+\.", doc)
    assert len(keys) == len(set(keys))
    questions = list(re.finditer(r"Question: (.*?)\nAnswer: (\d+)(?:\n|$)", doc))
    assert questions and len(questions) == doc.count("Question:")
    for q in questions:
        before = doc[:q.start()]
        if q.group(1) == "What is the pass key?":
            assert re.findall(r"The pass key is (\d{5})\.", before)[-1] == q.group(2)
        else:
            key = re.fullmatch(r"What is the value of key (\S+)\?", q.group(1)).group(1)
            assert re.findall(rf"The value of key {key} is (\d+)\.", before) == [q.group(2)]


def check_document(r: dict, length: int) -> None:
    """A training document: exactly `length` characters of complete, answered examples (or drills)."""
    doc = r["text"]
    assert set(r) == {"text", "prompt", "answer", "task"} and len(doc) == length and doc.isascii()
    assert doc.startswith(f"{r['prompt']} {r['answer']}") and r["prompt"].endswith("\nAnswer:")
    if not doc.startswith(tuple(longctx.INSTRUCTIONS.values())):
        check_drill(doc)
        assert r["task"] == ("passkey" if r["prompt"].endswith("pass key?\nAnswer:") else "multikey")
        assert len(doc) - len(doc.rstrip("\n")) < 120  # padded less than the shortest lookup
        return
    parts = _examples(doc)
    assert parts and doc.startswith(parts[0]) and r["task"] == _task_of(parts[0])
    assert "\n\n".join(parts) == doc.rstrip("\n") and len(doc) - len(doc.rstrip("\n")) <= 12
    for part in parts:
        task = _task_of(part)
        qas = re.findall(r"Question: (.*?)\nAnswer: ([0-9a-z]+)", part)
        assert len(qas) == 1 or (task == "multikey" and len(qas) <= longctx_tfds.MULTIKEY_QUESTIONS), qas
        first = part.index("\nAnswer: ") + len("\nAnswer:")
        prompt, answer = part[:first], qas[0][1]
        check_record({"prompt": prompt, "answer": answer, "task": task, "category": CATEGORIES[task],
                      "text": f"{prompt} {answer}"}, len(prompt), drawn_at=length)
        for question, value in qas[1:]:  # the further multikey questions: asked keys of this example, in turn
            key = re.fullmatch(r"What is the value of key (\S+)\?", question).group(1)
            assert re.findall(rf"The value of key {key} is (\d+)\.", prompt) == [value]
        assert len({q for q, _ in qas}) == len(qas)


@pytest.mark.parametrize("length", (511, 799, 2000))
def test_training_documents(length):
    rng = random.Random(0)
    docs = [longctx_tfds.make_document(rng, length) for _ in range(200)]
    for r in docs:
        check_document(r, length)
    assert len({r["text"] for r in docs}) == 200
    drills = [r["text"] for r in docs if not r["text"].startswith(tuple(longctx.INSTRUCTIONS.values()))]
    assert 0.35 < len(drills) / len(docs) < 0.65  # DRILL = 0.5
    assert sum(d.count("\nAnswer: ") for d in drills) > 3 * len(drills)  # many answers per window
    assert sum(d.count("pass key?") for d in drills) > len(drills) / 4
    examples = [r["text"] for r in docs if r["text"] not in drills]
    per_doc = [len(_examples(d)) for d in examples]
    assert 0.5 < per_doc.count(1) / len(per_doc) < 0.95 and max(per_doc) >= 2  # whole windows and mixtures
    tasks = [_task_of(p) for d in examples for p in _examples(d)]
    assert set(tasks) == set(TASKS)
    assert tasks.count("passkey") + tasks.count("multikey") > len(tasks) / 2  # retrieval weighted up
    asked = [len(re.findall(r"\nAnswer: ", p)) for d in examples for p in _examples(d) if _task_of(p) == "multikey"]
    assert max(asked) >= 2


def test_training_documents_deterministic_and_split():
    a = longctx_tfds.generate_split("train", 511, 20, 0)
    assert a == longctx_tfds.generate_split("train", 511, 20, 0) and len(a) == 20
    assert a != longctx_tfds.generate_split("train", 511, 20, 1)
    assert a != longctx_tfds.generate_split("validation", 511, 20, 0)
    for r in a + longctx_tfds.generate_split("validation", 511, 20, 0):
        check_document(r, 511)
    # the qa split: single examples, tasks in turn
    for i, r in enumerate(longctx_tfds.generate_split("qa", 511, 20, 0)):
        assert r["task"] == TASKS[i % 5] and r["text"] == f"{r['prompt']} {r['answer']}"
    with pytest.raises(ValueError, match="fits no task; use length >= 217"):
        longctx_tfds.make_document(random.Random(0), 200)
    for seed in range(10):
        r = longctx_tfds.make_document(random.Random(seed), 217)
        check_document(r, 217)


def test_drills_form_and_its_dataset_name(tmp_path):
    """The drills form: only retrieval drills; the mixed form's documents (and data key) are unchanged."""
    import hashlib

    from edge_jax.data import resolve
    drills = longctx_tfds.generate_split("train", 511, 40, 0, "drills")
    for r in drills:
        check_document(r, 511)
        assert not r["text"].startswith(tuple(longctx.INSTRUCTIONS.values()))
    mixed = "".join(r["text"] for r in longctx_tfds.generate_split("train", 300, 6, 0))
    assert hashlib.sha256(mixed.encode()).hexdigest()[:16] == "2a6d8c04ebde5e5b"  # what 1.2.0 wrote before forms
    source = resolve("drills", str(tmp_path), longctx_length=300, longctx_examples=8)
    assert source.key == "drills-drills_len300_n8_s0-v1.2.0" and source.splits == ("train", "validation")
    expected = longctx_tfds.generate_split("train", 300, 8, 0, "drills")
    assert source.documents("train") == [r["text"] for r in expected]
    key = resolve("longctx", str(tmp_path), longctx_length=300, longctx_examples=8).key
    assert key == "longctx-len300_n8_s0-v1.2.0"
    with pytest.raises(ValueError, match="unknown longctx form 'all'; valid: mixed, drills"):
        longctx_tfds.make_config(511, 8, 0, "all")
