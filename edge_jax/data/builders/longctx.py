"""`edge_longctx`: seeded long-context tasks at a configurable length (in characters).

Three tasks, in turn (example i has task i % 3):
  passkey      a 5-digit pass key hidden at a random depth in filler text; ask for it.
  multikey     4-8 "key: value" statements spread through the filler; ask for one value.
  aggregate    4-8 tally notes ("add 7 points") in separate segments; ask for their sum.

Each record has `prompt` (instruction + long text + question, about `length` characters,
ending in "Answer:"), `answer` (digits), `task`, and `text` = prompt + " " + answer (what the
LM trains on). Filler is drawn from a fixed set of plain sentences, so the only information
in a prompt is what the task needs.

Splits: train (`examples` records), validation (max(3, examples // 10)) and qa
(max(6, examples // 4), the prompts load_qa returns); each split has its own random stream,
and everything is a pure function of (length, examples, seed).
"""
from __future__ import annotations

import dataclasses
import random

import tensorflow_datasets as tfds

from edge_jax.data.builders.records import RecordsBuilder

TASKS = ("passkey", "multikey", "aggregate")
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
_KEY_A = ["amber", "silent", "rapid", "golden", "hollow", "crimson", "frozen", "quiet", "lunar",
          "iron", "velvet", "misty", "bright", "ancient", "copper", "wild"]
_KEY_B = ["falcon", "river", "lantern", "meadow", "harbor", "comet", "willow", "anchor", "ember",
          "garden", "summit", "violet", "beacon", "thistle", "canyon", "orchid"]
INSTRUCTIONS = {
    "passkey": "There is a pass key hidden inside a lot of irrelevant text. Find it and "
               "remember it; you will be asked for it.\n\n",
    "multikey": "The text below contains several keys, each with a numeric value, hidden among "
                "irrelevant sentences. Remember every key and its value.\n\n",
    "aggregate": "The text below contains tally notes, each adding some points, hidden among "
                 "irrelevant sentences. Keep a running total of the points.\n\n",
}


def _filler(rng: random.Random, n_chars: int) -> list[str]:
    out, size = [], 0
    while size < n_chars:
        s = rng.choice(FILLER)
        out.append(s)
        size += len(s) + 1
    return out


def _spread(rng: random.Random, sentences: list[str], needles: list[str]) -> str:
    """Insert needles at random, increasing positions (one per segment of the filler)."""
    k = len(needles)
    n = len(sentences)
    positions = [rng.randint(n * i // k, max(n * i // k, n * (i + 1) // k - 1)) for i in range(k)]
    out = list(sentences)
    for pos, needle in sorted(zip(positions, needles), key=lambda t: -t[0]):
        out.insert(pos, needle)
    return " ".join(out)


def _passkey(rng: random.Random):
    key = str(rng.randint(10000, 99999))
    return [f"The pass key is {key}. Remember it. {key} is the pass key."], \
        "What is the pass key?", key


def _multikey(rng: random.Random):
    n = rng.randint(4, 8)
    keys = rng.sample([f"{a}-{b}" for a in _KEY_A for b in _KEY_B], n)
    values = [str(rng.randint(100000, 999999)) for _ in keys]
    needles = [f"The value of key {k} is {v}." for k, v in zip(keys, values)]
    q = rng.randrange(n)
    return needles, f"What is the value of key {keys[q]}?", values[q]


def _aggregate(rng: random.Random):
    values = [rng.randint(1, 9) for _ in range(rng.randint(4, 8))]
    needles = [f"Tally note: add {v} points." for v in values]
    return needles, "What is the total number of points added by all tally notes?", str(sum(values))


_MAKERS = {"passkey": _passkey, "multikey": _multikey, "aggregate": _aggregate}


def make_example(rng: random.Random, task: str, length: int) -> dict:
    needles, question, answer = _MAKERS[task](rng)
    tail = f"\n\nQuestion: {question}\nAnswer:"
    head = INSTRUCTIONS[task]
    budget = length - len(head) - len(tail) - sum(len(x) + 1 for x in needles)
    body = _spread(rng, _filler(rng, max(budget, 0)), needles)
    prompt = head + body + tail
    return {"text": f"{prompt} {answer}", "prompt": prompt, "answer": answer, "task": task}


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
    """Synthetic long-context retrieval and aggregation (see module docstring)."""

    name = "edge_longctx"

    def split_names(self):
        return list(split_sizes(self.builder_config.examples))

    def records(self, split):
        c = self.builder_config
        return generate_split(split, c.length, c.examples, c.seed)
