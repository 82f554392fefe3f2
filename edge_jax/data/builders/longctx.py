"""`edge_longctx`: seeded long-context tasks at a configurable length (in characters).

Five tasks, one per LongBench-like category (`CATEGORIES`); example i has task i % 5:
  passkey    single_needle   a 5-digit pass key hidden at a random depth in filler text; ask
                             for it.
  multikey   multi_key       4-8 "key: value" statements spread through the filler; ask for one
                             value (6 digits).
  aggregate  aggregation     4-8 tally notes ("add 7 points") in separate segments; ask for
                             their sum.
  fewshot    few_shot        4-8 demonstrations "Example: abc -> def." of one per-prompt rule
                             (shift every letter k places along the alphabet, wrapping z -> a,
                             k in 1..25) spread through the filler; ask what a new word (3-5
                             letters) becomes. The answer is the shifted word.
  vartrack   code_tracking   a chain of 2-4 assignments "VAR qx = 48213 ." ... "VAR kt = qx ."
                             in order through the filler, plus 1-3 distractor assignments of
                             other variables to other numbers; ask for the value of the last
                             variable of the chain (the 5-digit number it resolves to).

Each record has `prompt` (instruction + long text + question, at most about `length`
characters, ending in "\\nAnswer:"), `answer` (digits or lowercase letters, no spaces), `task`,
and `text` = prompt + " " + answer (what the LM trains on). Filler is drawn from a fixed set of
plain sentences (no digits), so the only information in a prompt is what the task needs.
Everything is ASCII, so for a byte tokenizer characters are tokens.

Splits: train (`examples` records), validation (max(3, examples // 10)) and qa
(max(6, examples // 4), the prompts load_qa returns); each split has its own random stream,
and everything is a pure function of (length, examples, seed).

`eval_prompts(task, length, n, seed)` gives n evaluation records of one task whose prompts are
between length - 64 and length characters (in practice within 11 of `length`), with needles at
seeded random depths; the records also carry `category`. It is a pure function of its
arguments, independent of the builder's splits.
"""
from __future__ import annotations

import dataclasses
import random
import string
from typing import ClassVar

import tensorflow_datasets as tfds

from edge_jax.data.builders.records import RecordsBuilder

TASKS = ("passkey", "multikey", "aggregate", "fewshot", "vartrack")
CATEGORIES = {"passkey": "single_needle", "multikey": "multi_key", "aggregate": "aggregation",
              "fewshot": "few_shot", "vartrack": "code_tracking"}
FILLER = [
    "The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
    "There and back again.", "The river flows past the old mill.", "A gentle wind moves the leaves.",
    "The road winds over the hill.", "Clouds drift slowly across the valley.",
    "The market opens early in the morning.", "Birds sing in the tall trees.",
    "The lamp in the window is still lit.", "Rain falls softly on the roof.",
    "A cart rolls along the cobbled street.", "The bell in the tower rings at noon.",
    "Snow covers the distant mountains.", "The baker sets out fresh bread.",
    "Children play by the fountain.", "The ferry crosses the lake twice a day.",
    "Moss grows on the north side of the stones.",
]
_SHORTEST = min(len(s) for s in FILLER)
_KEY_A = ["amber", "silent", "rapid", "golden", "hollow", "crimson", "frozen", "quiet", "lunar",
          "iron", "velvet", "misty", "bright", "ancient", "copper", "wild"]
_KEY_B = ["falcon", "river", "lantern", "meadow", "harbor", "comet", "willow", "anchor", "ember",
          "garden", "summit", "violet", "beacon", "thistle", "canyon", "orchid"]
_LETTERS = string.ascii_lowercase
_VAR_NAMES = [a + b for a in _LETTERS for b in _LETTERS]
INSTRUCTIONS = {
    "passkey": "There is a pass key hidden inside a lot of irrelevant text. Find it and "
               "remember it; you will be asked for it.\n\n",
    "multikey": "The text below contains several keys, each with a numeric value, hidden among "
                "irrelevant sentences. Remember every key and its value.\n\n",
    "aggregate": "The text below contains tally notes, each adding some points, hidden among "
                 "irrelevant sentences. Keep a running total of the points.\n\n",
    "fewshot": "The text below contains examples of one secret rule that turns a word into "
               "another word, hidden among irrelevant sentences. Learn the rule from the "
               "examples.\n\n",
    "vartrack": "The text below contains variable assignments written like code, hidden among "
                "irrelevant sentences. A variable may be set to a number or to another "
                "variable. Track the value of every variable.\n\n",
}

# Needle and question templates (also used to size the worst case in `min_length`).
def _passkey_needle(key): return f"The pass key is {key}. Remember it. {key} is the pass key."
def _multikey_needle(key, value): return f"The value of key {key} is {value}."
def _multikey_question(key): return f"What is the value of key {key}?"
def _tally_needle(v): return f"Tally note: add {v} points."
def _fewshot_needle(x, y): return f"Example: {x} -> {y}."
def _fewshot_question(x): return f"Using the same rule, what does {x} become?"
def _var_needle(name, value): return f"VAR {name} = {value} ."
def _var_question(name): return f"What is the value of variable {name}?"


_PASSKEY_Q = "What is the pass key?"
_AGGREGATE_Q = "What is the total number of points added by all tally notes?"


def _passkey(rng: random.Random):
    key = str(rng.randint(10000, 99999))
    return [_passkey_needle(key)], _PASSKEY_Q, key


def _multikey(rng: random.Random):
    n = rng.randint(4, 8)
    keys = rng.sample([f"{a}-{b}" for a in _KEY_A for b in _KEY_B], n)
    values = [str(rng.randint(100000, 999999)) for _ in keys]
    needles = [_multikey_needle(k, v) for k, v in zip(keys, values)]
    q = rng.randrange(n)
    return needles, _multikey_question(keys[q]), values[q]


def _aggregate(rng: random.Random):
    values = [rng.randint(1, 9) for _ in range(rng.randint(4, 8))]
    return [_tally_needle(v) for v in values], _AGGREGATE_Q, str(sum(values))


def shift_word(word: str, shift: int) -> str:
    """The few-shot rule: every lowercase letter moves `shift` places along the alphabet."""
    return "".join(_LETTERS[(_LETTERS.index(c) + shift) % 26] for c in word)


def _fewshot(rng: random.Random):
    shift = rng.randint(1, 25)
    n_words, words = rng.randint(4, 8) + 1, []  # the demonstrations, then the query
    while len(words) < n_words:
        w = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 5)))
        if w not in words:
            words.append(w)
    *demos, query = words
    needles = [_fewshot_needle(w, shift_word(w, shift)) for w in demos]
    return needles, _fewshot_question(query), shift_word(query, shift)


def _vartrack(rng: random.Random):
    chain_len, n_distract = rng.randint(2, 4), rng.randint(1, 3)
    names = rng.sample(_VAR_NAMES, chain_len + n_distract)
    numbers = rng.sample(range(10000, 100000), 1 + n_distract)
    chain = [_var_needle(names[0], numbers[0])]
    chain += [_var_needle(names[i], names[i - 1]) for i in range(1, chain_len)]
    needles = list(chain)
    for name, number in zip(names[chain_len:], numbers[1:]):
        needles.insert(rng.randint(0, len(needles)), _var_needle(name, number))
    return needles, _var_question(names[chain_len - 1]), str(numbers[0])


_MAKERS = {"passkey": _passkey, "multikey": _multikey, "aggregate": _aggregate,
           "fewshot": _fewshot, "vartrack": _vartrack}


def _worst_case(task: str) -> tuple[list[str], str]:
    """The longest needles and question a task can draw."""
    if task == "passkey":
        return [_passkey_needle("0" * 5)], _PASSKEY_Q
    if task == "multikey":
        key = max(_KEY_A, key=len) + "-" + max(_KEY_B, key=len)
        return [_multikey_needle(key, "0" * 6)] * 8, _multikey_question(key)
    if task == "aggregate":
        return [_tally_needle(9)] * 8, _AGGREGATE_Q
    if task == "fewshot":
        return [_fewshot_needle("a" * 5, "a" * 5)] * 8, _fewshot_question("a" * 5)
    return [_var_needle("aa", "0" * 5)] * 7, _var_question("aa")


def _tail(question: str) -> str:
    return f"\n\nQuestion: {question}\nAnswer:"


def _body_len(needles: list[str]) -> int:
    return sum(len(x) for x in needles) + len(needles) - 1


def min_length(task: str) -> int:
    """The shortest prompt length (characters) that fits every draw of `task`'s needles."""
    if task not in _MAKERS:
        raise ValueError(f"unknown longctx task {task!r}; pick one of {', '.join(TASKS)}")
    needles, question = _worst_case(task)
    return len(INSTRUCTIONS[task]) + _body_len(needles) + len(_tail(question))


def _fill(rng: random.Random, budget: int) -> list[str]:
    """Filler sentences that cost (len + 1 each, for the joining space) at most `budget`,
    leaving less than the shortest sentence unused."""
    out: list[str] = []
    while budget >= _SHORTEST + 1:
        s = rng.choice(FILLER)
        if len(s) + 1 > budget:  # near the end: only sentences that still fit
            fits = [f for f in FILLER if len(f) + 1 <= budget]
            s = rng.choice(fits)
        out.append(s)
        budget -= len(s) + 1
    return out


def _spread(rng: random.Random, sentences: list[str], needles: list[str]) -> str:
    """Insert needles, in their order, at random depths (needle i in the i-th of k equal
    segments of the filler, anywhere within it)."""
    k, n = len(needles), len(sentences)
    positions = [rng.randint(n * i // k, n * (i + 1) // k) for i in range(k)]  # non-decreasing
    out, prev = [], 0
    for pos, needle in zip(positions, needles):
        out.extend(sentences[prev:pos])
        out.append(needle)
        prev = pos
    out.extend(sentences[prev:])
    return " ".join(out)


def make_example(rng: random.Random, task: str, length: int) -> dict:
    """One record of `task` whose prompt is at most `length` characters (and within a filler
    sentence of it) when the needles fit; longer (needles only, no filler) when they do not."""
    needles, question, answer = _MAKERS[task](rng)
    head, tail = INSTRUCTIONS[task], _tail(question)
    budget = length - len(head) - len(tail) - _body_len(needles)
    prompt = head + _spread(rng, _fill(rng, budget), needles) + tail
    return {"text": f"{prompt} {answer}", "prompt": prompt, "answer": answer, "task": task}


def eval_prompts(task: str, length: int, n: int, seed: int) -> list[dict]:
    """n records of `task` with prompts of length - 64 to `length` characters (ASCII, so
    characters == byte tokens), needles at seeded random depths. Fields: prompt, answer, task,
    category, text. A pure function of its arguments (its own random stream)."""
    if task not in _MAKERS:
        raise ValueError(f"unknown longctx task {task!r}; pick one of {', '.join(TASKS)}")
    need = min_length(task)
    if length < need:
        raise ValueError(f"length {length} is too short for longctx task {task!r}; "
                         f"use length >= {need}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}; pass the number of prompts wanted")
    rng = random.Random(f"edge_longctx-eval:{task}:{length}:{n}:{seed}")
    return [{**make_example(rng, task, length), "category": CATEGORIES[task]} for _ in range(n)]


def split_sizes(examples: int) -> dict[str, int]:
    return {"train": examples, "validation": max(3, examples // 10), "qa": max(6, examples // 4)}


def generate_split(split: str, length: int, examples: int, seed: int) -> list[dict]:
    rng = random.Random(f"edge_longctx:{seed}:{length}:{split}")
    n = split_sizes(examples)[split]
    return [make_example(rng, TASKS[i % len(TASKS)], length) for i in range(n)]


@dataclasses.dataclass
class LongctxConfig(tfds.core.BuilderConfig):
    length: int = 4096
    examples: int = 200
    seed: int = 0


def make_config(length: int = 4096, examples: int = 200, seed: int = 0) -> LongctxConfig:
    if length < 256 or examples < 1:
        raise ValueError(f"longctx needs length >= 256 and examples >= 1, got {length}, {examples}")
    return LongctxConfig(name=f"len{length}_n{examples}_s{seed}", length=length,
                         examples=examples, seed=seed,
                         description=f"{examples} examples of ~{length} characters, seed {seed}")


class EdgeLongctx(RecordsBuilder):
    """Synthetic long-context retrieval, aggregation, few-shot and variable-tracking tasks
    (see module docstring)."""

    name = "edge_longctx"
    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {
        "1.0.0": "First release: passkey, multikey, aggregate.",
        "1.1.0": "Five tasks (adds fewshot and vartrack); prompts fit within `length`.",
    }

    def split_names(self):
        return list(split_sizes(self.builder_config.examples))

    def records(self, split):
        c = self.builder_config
        return generate_split(split, c.length, c.examples, c.seed)
