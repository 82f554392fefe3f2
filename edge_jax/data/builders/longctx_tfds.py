"""`edge_longctx`: the TFDS builder of the long-context tasks (:mod:`edge_jax.data.builders.longctx_tasks`)
and the training documents it writes.

Training documents (`make_document`, the train and validation splits) are exactly `length`
characters, so with data.seq_len = length + 1 (the document and its eos) every training window
holds one whole document and nothing is cut between windows. Half of them (`DRILL`) are retrieval
drills: pass keys and key-value lookups in the tasks' own needle and question forms but without
instructions and with little filler, several per document and each lookup asking most of its keys
in turn, so a window holds many answers to copy. The others are task examples: one filling the
document (`SINGLE` of them) or several shorter ones of random lengths, tasks drawn with
`TRAIN_WEIGHTS` (the two retrieval tasks most), a multikey example asking up to
`MULTIKEY_QUESTIONS` of its keys where they fit ("Question: ... Answer: v" pairs after the first).
Parts are joined by a blank line and newlines pad the document to its length. A document's record
has its first part's prompt, answer and task. The `drills` form (dataset name `drills`) writes
only retrieval drills (train and validation): mixed 1:1 into `longctx`, three documents in four are
drills, and a tiny model needs that many key-value lookups before it matches a question's key
(measured in the docs: "How the tiny base was found").

Splits: train (`examples` documents), validation (max(3, examples // 10) documents) and qa
(max(6, examples // 4) single examples, tasks in turn, the prompts load_qa returns); each split
has its own random stream, and everything is a pure function of (form, length, examples, seed).
"""
from __future__ import annotations

import dataclasses
import random
from typing import ClassVar

import tensorflow_datasets as tfds

from edge_jax.data.builders.longctx_tasks import (
    FILLER,
    INSTRUCTIONS,
    KEY_A,
    KEY_B,
    MAKERS,
    PASSKEY_Q,
    TASKS,
    body_len,
    fill,
    make_example,
    min_length,
    multikey_draw,
    multikey_needle,
    multikey_question,
    passkey_needle,
    question_tail,
    spread,
)
from edge_jax.data.builders.records import RecordsBuilder

TRAIN_WEIGHTS = {"passkey": 2, "multikey": 4, "aggregate": 1, "fewshot": 1, "vartrack": 2}
SINGLE = 0.7  # the share of documents that are one example filling the document
MULTIKEY_QUESTIONS = 3  # a training multikey example asks 1 .. this many of its keys (as many as fit)
_SEP = "\n\n"
_LONGEST_ANSWER = {"passkey": 5, "multikey": 6, "aggregate": 2, "fewshot": 5, "vartrack": 5}


def _answered(qas: list[tuple[str, str]]) -> str:
    """What follows the first question's prompt: " a1", then "\\n\\nQuestion: q2\\nAnswer: a2" ..."""
    return "".join(f" {a}" if i == 0 else f"{question_tail(q)} {a}" for i, (q, a) in enumerate(qas))


def training_example(rng: random.Random, task: str, length: int) -> str:
    """The text of one complete example of at most `length` (>= `shortest_text(task)`) characters:
    prompt, space, answer; a multikey example asks 1 .. MULTIKEY_QUESTIONS of its keys, as many as
    fit beside its needles."""
    if task == "multikey":
        needles, qas = multikey_draw(rng, length - 1 - _LONGEST_ANSWER[task], rng.randint(1, MULTIKEY_QUESTIONS))
        fixed = len(INSTRUCTIONS[task]) + len(question_tail(qas[0][0])) + body_len(needles)
        while len(qas) > 1 and fixed + len(_answered(qas)) > length:
            qas.pop()
    else:
        needles, question, answer = MAKERS[task](rng, length)
        qas = [(question, answer)]
    head, tail, answers = INSTRUCTIONS[task], question_tail(qas[0][0]), _answered(qas)
    budget = length - len(head) - len(tail) - len(answers) - body_len(needles)
    return head + spread(rng, fill(rng, budget), needles) + tail + answers


def shortest_text(task: str) -> int:
    """The shortest length at which `training_example` fits every draw of `task`."""
    return min_length(task) + 1 + _LONGEST_ANSWER[task]


DRILL = 0.5  # the share of training documents that are retrieval drills (below)
FORMS = {"mixed": DRILL, "drills": 1.0}  # form -> its share of drill documents
DRILL_PASSKEY = 0.3  # the share of drill blocks that are pass keys (the rest key-value lookups)
_ALL_KEYS = tuple(f"{a}-{b}" for a in KEY_A for b in KEY_B)


def _drill_block(rng: random.Random, room: int, used: set, passkey: bool) -> tuple[str, str] | None:
    """(task, text) of one retrieval drill of at most `room` characters (None when none fits): no
    instruction and little filler. A pass key: 0-2 filler sentences, the needle, 0-2 more, then its
    question and answer. A key-value lookup (multikey): 2-6 "The value of key K is V." statements
    (keys not in `used`, so a document never reuses one), then at least half of them asked in random
    order, each answered (keys and questions dropped, down to one of each, where they do not fit)."""
    if passkey:
        key = str(rng.randint(10000, 99999))
        parts = rng.sample(FILLER, rng.randint(0, 2)) + [passkey_needle(key)] + rng.sample(FILLER, rng.randint(0, 2))
        text = " ".join(parts) + question_tail(PASSKEY_Q) + f" {key}"
        return ("passkey", text) if len(text) <= room else None
    keys = rng.sample([k for k in _ALL_KEYS if k not in used], rng.randint(2, 6))
    values = [str(rng.randint(100000, 999999)) for _ in keys]
    asked = rng.sample(range(len(keys)), rng.randint((len(keys) + 1) // 2, len(keys)))
    while True:
        body = " ".join(multikey_needle(k, v) for k, v in zip(keys, values))
        text = body + "".join(f"{question_tail(multikey_question(keys[i]))} {values[i]}" for i in asked)
        if len(text) <= room:
            used.update(keys)
            return "multikey", text
        drop = next((i for i in range(len(keys)) if i not in asked), None)  # a key that is not asked
        if drop is None and len(asked) == 1:
            return None
        if drop is None:
            drop = asked.pop()
        del keys[drop], values[drop]
        asked = [i - (i > drop) for i in asked]


def _drill(rng: random.Random, length: int) -> tuple[list[str], str]:
    """The blocks of a drill document (until not even the shortest lookup fits) and its first task."""
    parts, tasks, used = [], [], set()
    while True:
        room = length - len(_SEP.join(parts)) - (len(_SEP) if parts else 0)
        block = _drill_block(rng, room, used, rng.random() < DRILL_PASSKEY) or _drill_block(rng, room, used, False)
        if block is None:
            return parts, tasks[0] if tasks else ""
        tasks.append(block[0])
        parts.append(block[1])


def make_document(rng: random.Random, length: int, drill: float = DRILL) -> dict:
    """A training document of exactly `length` characters: complete examples, or retrieval drills
    (a `drill` share of them), joined by a blank line and padded with newlines (module docstring).
    `text` is the document; `prompt`, `answer` and `task` are its first example's (or drill's)."""
    weights = {t: w for t, w in TRAIN_WEIGHTS.items() if shortest_text(t) <= length}
    if not weights:
        raise ValueError(f"a longctx training document of {length} characters fits no task; use length >= "
                         f"{min(shortest_text(t) for t in TASKS)}")
    parts, first_task = _drill(rng, length) if rng.random() < drill else ([], "")
    if not parts:
        parts, first_task = _examples(rng, length, weights)
    doc = _SEP.join(parts)
    doc += "\n" * (length - len(doc))
    cut = parts[0].index("\nAnswer: ") + len("\nAnswer:")
    return {"text": doc, "prompt": parts[0][:cut], "answer": parts[0][cut + 1:].split("\n")[0],
            "task": first_task}


def _examples(rng: random.Random, length: int, weights: dict) -> tuple[list[str], str]:
    """Complete examples for a document: one filling it (`SINGLE` of the time) or several."""
    shortest = min(shortest_text(t) for t in weights)
    parts: list[str] = []
    first_task, single, room = "", rng.random() < SINGLE, length
    while True:
        can = [t for t in weights if shortest_text(t) <= room]
        if not can:
            break
        # several examples: while one can, leave room for another after this one (the last fills the rest)
        follow = [] if single else [t for t in can if shortest_text(t) + len(_SEP) + shortest <= room]
        pool = follow or can
        task = rng.choices(pool, [weights[t] for t in pool])[0]
        size = rng.randint(shortest_text(task), room - len(_SEP) - shortest) if follow else room
        first_task = first_task or task
        parts.append(training_example(rng, task, size))
        room = length - len(_SEP.join(parts)) - len(_SEP)
        if single:
            break
    return parts, first_task


def split_sizes(examples: int) -> dict[str, int]:
    return {"train": examples, "validation": max(3, examples // 10), "qa": max(6, examples // 4)}


def generate_split(split: str, length: int, examples: int, seed: int, form: str = "mixed") -> list[dict]:
    # the mixed form's stream is the one edge_longctx 1.2.0 has always written
    rng = random.Random(f"edge_longctx:{seed}:{length}:{split}" + ("" if form == "mixed" else f":{form}"))
    n = split_sizes(examples)[split]
    if split == "qa":
        return [make_example(rng, TASKS[i % len(TASKS)], length) for i in range(n)]
    return [make_document(rng, length, FORMS[form]) for _ in range(n)]


@dataclasses.dataclass
class LongctxConfig(tfds.core.BuilderConfig):
    form: str = "mixed"
    length: int = 4096
    examples: int = 200
    seed: int = 0


def make_config(length: int = 4096, examples: int = 200, seed: int = 0, form: str = "mixed") -> LongctxConfig:
    if form not in FORMS:
        raise ValueError(f"unknown longctx form {form!r}; valid: {', '.join(FORMS)}")
    if length < 256 or examples < 1:
        raise ValueError(f"longctx needs length >= 256 and examples >= 1, got {length}, {examples}")
    prefix = "" if form == "mixed" else f"{form}_"  # the mixed form keeps its 1.2.0 name (and data key)
    return LongctxConfig(name=f"{prefix}len{length}_n{examples}_s{seed}", form=form, length=length,
                         examples=examples, seed=seed,
                         description=f"{examples} {form} documents of ~{length} characters, seed {seed}")


class EdgeLongctx(RecordsBuilder):
    """Synthetic long-context retrieval, aggregation, few-shot and variable-tracking tasks
    (see module docstring)."""

    name = "edge_longctx"
    VERSION = tfds.core.Version("1.2.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {
        "1.0.0": "First release: passkey, multikey, aggregate.",
        "1.1.0": "Five tasks (adds fewshot and vartrack); prompts fit within `length`.",
        "1.2.0": "Train and validation documents of exactly `length` characters mixing complete examples "
                 "(retrieval weighted up, multikey asking several keys); multikey fits its key count to "
                 "the length.",
    }

    def split_names(self):
        return list(split_sizes(self.builder_config.examples))

    def records(self, split):
        c = self.builder_config
        return generate_split(split, c.length, c.examples, c.seed, c.form)
