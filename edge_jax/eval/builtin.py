"""Built-in zero-shot tasks that need no download: tiny-scale stand-ins for the benchmarks.

Each is 4-way multiple choice (chance 0.25) whose documents are a pure function of the run's data
config and a fixed seed, with the gold position shuffled:

  facts_mc     an attribute of a person of the ``facts`` corpus, asked with a held-out question
               wording (the builder's held-out question templates, never in training). The people
               asked about are the half whose facts training holds twice: in their biographies and
               in question-answer pairs in the training wordings; so the task measures recall of
               trained facts under a new wording. (v1 asked about the other half, whose facts are
               only in biographies: knowledge extraction, which no tiny model learns in a few
               hundred steps: 0.20-0.29 at 200-600 steps, chance 0.25.) The distractors are other
               values of the same attribute. The corpus size is the run's ``data.facts_entities``
               when it trains on ``facts``. Few-shot examples: the other half, in the training
               question wordings (other people, so no shot answers a document).
  code_cloze   the real next line of a held-out (validation-split) ``pystdlib`` file after the
               text before it, against three qualifying lines of other validation files
               re-indented like the real one, so the choice is about content.
  longctx_mc   after filler text holding several "key is value" statements, the value of one key
               against the values of the other keys in the same text (the model must retrieve
               the right key, not any number it saw). The text fills ``max_length`` tokens.

Their documents are checked as the benchmarks' are (:mod:`edge_jax.eval.validate`).

``--tasks builtin`` runs all three.
"""
from __future__ import annotations

import functools
import os
import random

from edge_jax.eval.tasks import GROUPS, ZERO_SHOT_TASKS, BuiltinSource, Format, Task, TaskError
from edge_jax.eval.validate import Choices, Index, Text, check_documents

SEED = 0
FACTS_DOCS, CODE_DOCS, LONGCTX_DOCS = 1200, 1000, 200
FACTS_DEFAULT_ENTITIES = 2000
CODE_CONTEXT_CHARS = 2000
MIN_LINE_CHARS = 10
CHARS_PER_TOKEN_BOUND = 8  # filler drawn for longctx_mc: enough characters for any tokenizer's tokens


def _shuffled(rng: random.Random, gold: str, others: list[str]) -> tuple[list[str], int]:
    choices = [gold, *others]
    rng.shuffle(choices)
    return choices, choices.index(gold)


def _checked(name: str, split: str, docs: list[dict]) -> list[dict]:
    """``docs``, checked as every task's documents are (:mod:`edge_jax.eval.validate`)."""
    check_documents(name, docs, lambda i: f"{name} (built-in, split '{split}') record index {i}",
                    fix="the construction should never make one: please report it with the run's data config")
    return docs


def _question_format() -> Format:
    return Format("multiple_choice", lambda d: d["text"], lambda d: d["gold"], lambda d: d["choices"])


# ---- facts_mc ----

def _facts_entities(data_cfg) -> int:
    parts = [p.partition("*")[0] for p in str(data_cfg.name).split("+")]
    return int(data_cfg.facts_entities) if "facts" in parts else FACTS_DEFAULT_ENTITIES


@functools.lru_cache(maxsize=8)
def _facts_docs(entities: int, split: str) -> tuple:
    from edge_jax.data.builders.facts import ATTRIBUTES, TEMPLATES, make_people
    people = make_people(entities, 0)
    half = entities // 2
    pool = {a: sorted({p[a] for p in people}) for a in ATTRIBUTES}
    rng = random.Random(f"facts_mc:{entities}:{split}:{SEED}")
    group, which = (people[:half], 3) if split == "test" else (people[half:], 2)
    pairs = [(p, a) for p in group for a in ATTRIBUTES]
    rng.shuffle(pairs)
    docs = []
    for person, attr in pairs[:FACTS_DOCS]:
        others = rng.sample([v for v in pool[attr] if v != person[attr]], 3)
        choices, gold = _shuffled(rng, person[attr], others)
        question = rng.choice(TEMPLATES[attr][which]).format(n=person["name"])
        docs.append({"text": f"Question: {question}\nAnswer:", "choices": choices, "gold": gold, "attribute": attr})
    return tuple(docs)


def _load_facts(source: BuiltinSource, split: str) -> list[dict]:
    return _checked("facts_mc", split, list(_facts_docs(_facts_entities(source.data_cfg), split)))


# ---- code_cloze ----

def _qualifies(line: str) -> bool:
    body = line.strip()
    return len(body.replace(" ", "")) >= MIN_LINE_CHARS and not body.startswith("#")


@functools.lru_cache(maxsize=4)
def _code_docs(data_dir: str, max_files: str) -> tuple:
    from edge_jax.data.sources import PYSTDLIB_MAX_FILES_ENV, resolve
    files = resolve("pystdlib", data_dir).documents("validation")
    rng = random.Random(f"code_cloze:{SEED}")
    lines = [text.split("\n") for text in files]
    candidates = [[i for i, line in enumerate(ls) if i >= 3 and _qualifies(line)] for ls in lines]
    usable = [f for f, c in enumerate(candidates) if c]
    if len(usable) < 2:
        raise TaskError(f"code_cloze needs lines from at least two pystdlib validation files, found {len(usable)}; "
                        f"unset {PYSTDLIB_MAX_FILES_ENV} or raise it")
    per_file = -(-CODE_DOCS // max(len(usable), 1))
    picks = [(f, i) for f in usable for i in sorted(rng.sample(candidates[f], min(per_file, len(candidates[f]))))]
    rng.shuffle(picks)
    docs = []
    for f, i in picks[:CODE_DOCS]:
        gold = lines[f][i].rstrip()
        indent = gold[:len(gold) - len(gold.lstrip())]
        others: list[str] = []
        while len(others) < 3:
            g = rng.choice([u for u in usable if u != f])
            line = indent + lines[g][rng.choice(candidates[g])].strip()
            if line != gold and line not in others:
                others.append(line)
        context = "\n".join(lines[f][:i]) + "\n"
        if len(context) > CODE_CONTEXT_CHARS:
            cut = context.find("\n", len(context) - CODE_CONTEXT_CHARS) + 1
            context = context[cut:]
        choices, index = _shuffled(rng, gold, others)
        docs.append({"text": context, "choices": choices, "gold": index})
    return tuple(docs)


def _load_code(source: BuiltinSource, split: str) -> list[dict]:
    from edge_jax.data.sources import PYSTDLIB_MAX_FILES_ENV, data_dir_default
    data_dir = getattr(source.data_cfg, "data_dir", "") or data_dir_default()
    return _checked("code_cloze", split, list(_code_docs(data_dir, os.environ.get(PYSTDLIB_MAX_FILES_ENV, ""))))


# ---- longctx_mc ----

_KEYS = ["falcon", "river", "lantern", "meadow", "harbor", "comet", "willow", "anchor", "ember", "garden",
         "summit", "violet", "beacon", "thistle", "canyon", "orchid", "copper", "velvet", "amber", "lunar"]


def _longctx_doc(rng: random.Random, tokenizer, max_length: int) -> dict:
    from edge_jax.data.builders.longctx_tasks import FILLER
    keys = rng.sample(_KEYS, 4)
    values = [str(v) for v in rng.sample(range(1000, 10000), 4)]
    asked = rng.randrange(4)
    needles = [f"{k} is {v}." for k, v in zip(keys, values)]
    tail = f"\nQuestion: What is {keys[asked]}?\nAnswer:"
    drawn: list[str] = []
    while sum(len(x) + 1 for x in drawn) < CHARS_PER_TOKEN_BOUND * max_length:
        drawn.append(rng.choice(FILLER))

    def fits(n: int) -> bool:
        return len(tokenizer.encode(_spread(drawn[:n], needles) + tail + " " + values[asked])) <= max_length

    lo, hi = 0, len(drawn)  # the most filler sentences that fit, by bisection
    if not fits(0):
        raise TaskError(f"longctx_mc needs more than {max_length} tokens; raise --max-length (eval.max_length)")
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    text = _spread(drawn[:lo], needles) + tail
    choices, gold = _shuffled(rng, values[asked], [v for i, v in enumerate(values) if i != asked])
    return {"text": text, "choices": choices, "gold": gold}


def _spread(filler: list[str], needles: list[str]) -> str:
    """Needles evenly through the filler, in order."""
    k, n, out = len(needles), len(filler), []
    for i, needle in enumerate(needles):
        out += filler[n * i // k:n * (i + 1) // k] + [needle]
    return " ".join(out)


def _load_longctx(source: BuiltinSource, split: str) -> list[dict]:
    rng = random.Random(f"longctx_mc:{source.max_length}:{SEED}")
    return _checked("longctx_mc", split, [_longctx_doc(rng, source.tokenizer, source.max_length)
                                          for _ in range(LONGCTX_DOCS)])


# What every built-in task's format reads: a context, non-empty choices, a gold index among them.
_SCHEMA = (Text("text", empty=True), Choices("choices"), Index("gold", "choices"))
ZERO_SHOT_TASKS.register("facts_mc", Task("facts_mc", _question_format(), _load_facts, "test", "train",
                                "edge_jax facts_mc v2", builtin=True,
                                description="facts corpus, held-out question wordings", schema=_SCHEMA))
ZERO_SHOT_TASKS.register("code_cloze", Task("code_cloze",
                                  Format("multiple_choice", lambda d: d["text"], lambda d: d["gold"],
                                         lambda d: d["choices"], target_delimiter=""),
                                  _load_code, "test", None, "edge_jax code_cloze v1", builtin=True,
                                  description="next line of a held-out pystdlib file", schema=_SCHEMA))
ZERO_SHOT_TASKS.register("longctx_mc", Task("longctx_mc", _question_format(), _load_longctx, "test", None,
                                  "edge_jax longctx_mc v1", builtin=True,
                                  description="a key's value after filler, among the other keys' values",
                                  schema=_SCHEMA))
GROUPS["builtin"] = ("facts_mc", "code_cloze", "longctx_mc")
