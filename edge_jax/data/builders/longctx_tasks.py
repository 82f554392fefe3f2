"""The seeded long-context tasks of `edge_longctx`, at a configurable length (in characters).

Five tasks, one per LongBench-like category (`CATEGORIES`):
  passkey    single_needle   a 5-digit pass key hidden at a random depth in filler text; ask
                             for it.
  multikey   multi_key       4-8 "key: value" statements spread through the filler (at most as
                             many as fit in `length`: 4-6 at 500 characters, 4-8 from 547 on);
                             ask for one value (6 digits).
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

An example has `prompt` (instruction + long text + question, at most `length` characters,
ending in "\\nAnswer:"), `answer` (digits or lowercase letters, no spaces), `task`, and
`text` = prompt + " " + answer. Filler is drawn from a fixed set of plain sentences (no digits),
so the only information in a prompt is what the task needs. Everything is ASCII, so for a byte
tokenizer characters are tokens.

`eval_prompts(task, length, n, seed)` gives n evaluation records of one task whose prompts are
between length - 64 and length characters (in practice within 11 of `length`), with needles at
seeded random depths; the records also carry `category`. It is a pure function of its
arguments, independent of the builder's splits. The training documents, the splits and the TFDS
builder are in :mod:`edge_jax.data.builders.longctx_tfds`.
"""
from __future__ import annotations

import random
import string

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
KEY_A = ["amber", "silent", "rapid", "golden", "hollow", "crimson", "frozen", "quiet", "lunar",
          "iron", "velvet", "misty", "bright", "ancient", "copper", "wild"]
KEY_B = ["falcon", "river", "lantern", "meadow", "harbor", "comet", "willow", "anchor", "ember",
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
def passkey_needle(key): return f"The pass key is {key}. Remember it. {key} is the pass key."
def multikey_needle(key, value): return f"The value of key {key} is {value}."
def multikey_question(key): return f"What is the value of key {key}?"
def _tally_needle(v): return f"Tally note: add {v} points."
def _fewshot_needle(x, y): return f"Example: {x} -> {y}."
def _fewshot_question(x): return f"Using the same rule, what does {x} become?"
def _var_needle(name, value): return f"VAR {name} = {value} ."
def _var_question(name): return f"What is the value of variable {name}?"


PASSKEY_Q = "What is the pass key?"
_AGGREGATE_Q = "What is the total number of points added by all tally notes?"


_LONGEST_KEY = max(KEY_A, key=len) + "-" + max(KEY_B, key=len)
MIN_KEYS, MAX_KEYS = 4, 8  # multikey's key count (fewer than MAX_KEYS where they would not fit)


def _passkey(rng: random.Random, length: int):
    key = str(rng.randint(10000, 99999))
    return [passkey_needle(key)], PASSKEY_Q, key


def _multikey_keys(length: int) -> int:
    """The most keys (MIN_KEYS .. MAX_KEYS) whose longest draw fits a `length`-character prompt."""
    fixed = len(INSTRUCTIONS["multikey"]) + len(question_tail(multikey_question(_LONGEST_KEY)))
    needle = len(multikey_needle(_LONGEST_KEY, "0" * 6)) + 1
    return max(MIN_KEYS, min(MAX_KEYS, (length - fixed + 1) // needle))


def multikey_draw(rng: random.Random, length: int, questions: int = 1):
    """Needles and ``questions`` distinct (question, value) pairs, the first one chosen as eval's is."""
    n = rng.randint(MIN_KEYS, _multikey_keys(length))
    keys = rng.sample([f"{a}-{b}" for a in KEY_A for b in KEY_B], n)
    values = [str(rng.randint(100000, 999999)) for _ in keys]
    needles = [multikey_needle(k, v) for k, v in zip(keys, values)]
    asked = [rng.randrange(n)]
    if questions > 1:
        asked += rng.sample([i for i in range(n) if i != asked[0]], min(questions, n) - 1)
    return needles, [(multikey_question(keys[i]), values[i]) for i in asked]


def _multikey(rng: random.Random, length: int):
    needles, [(question, value)] = multikey_draw(rng, length)
    return needles, question, value


def _aggregate(rng: random.Random, length: int):
    values = [rng.randint(1, 9) for _ in range(rng.randint(4, 8))]
    return [_tally_needle(v) for v in values], _AGGREGATE_Q, str(sum(values))


def shift_word(word: str, shift: int) -> str:
    """The few-shot rule: every lowercase letter moves `shift` places along the alphabet."""
    return "".join(_LETTERS[(_LETTERS.index(c) + shift) % 26] for c in word)


def _fewshot(rng: random.Random, length: int):
    shift = rng.randint(1, 25)
    n_words, words = rng.randint(4, 8) + 1, []  # the demonstrations, then the query
    while len(words) < n_words:
        w = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 5)))
        if w not in words:
            words.append(w)
    *demos, query = words
    needles = [_fewshot_needle(w, shift_word(w, shift)) for w in demos]
    return needles, _fewshot_question(query), shift_word(query, shift)


def _vartrack(rng: random.Random, length: int):
    chain_len, n_distract = rng.randint(2, 4), rng.randint(1, 3)
    names = rng.sample(_VAR_NAMES, chain_len + n_distract)
    numbers = rng.sample(range(10000, 100000), 1 + n_distract)
    chain = [_var_needle(names[0], numbers[0])]
    chain += [_var_needle(names[i], names[i - 1]) for i in range(1, chain_len)]
    needles = list(chain)
    for name, number in zip(names[chain_len:], numbers[1:]):
        needles.insert(rng.randint(0, len(needles)), _var_needle(name, number))
    return needles, _var_question(names[chain_len - 1]), str(numbers[0])


MAKERS = {"passkey": _passkey, "multikey": _multikey, "aggregate": _aggregate,
           "fewshot": _fewshot, "vartrack": _vartrack}


def _worst_case(task: str) -> tuple[list[str], str]:
    """The longest needles and question a task can draw (multikey: with its fewest keys)."""
    if task == "passkey":
        return [passkey_needle("0" * 5)], PASSKEY_Q
    if task == "multikey":
        return [multikey_needle(_LONGEST_KEY, "0" * 6)] * MIN_KEYS, multikey_question(_LONGEST_KEY)
    if task == "aggregate":
        return [_tally_needle(9)] * 8, _AGGREGATE_Q
    if task == "fewshot":
        return [_fewshot_needle("a" * 5, "a" * 5)] * 8, _fewshot_question("a" * 5)
    return [_var_needle("aa", "0" * 5)] * 7, _var_question("aa")


def question_tail(question: str) -> str:
    return f"\n\nQuestion: {question}\nAnswer:"


def body_len(needles: list[str]) -> int:
    return sum(len(x) for x in needles) + len(needles) - 1


def min_length(task: str) -> int:
    """The shortest prompt length (characters) that fits every draw of `task`'s needles."""
    if task not in MAKERS:
        raise ValueError(f"unknown longctx task {task!r}; pick one of {', '.join(TASKS)}")
    needles, question = _worst_case(task)
    return len(INSTRUCTIONS[task]) + body_len(needles) + len(question_tail(question))


def fill(rng: random.Random, budget: int) -> list[str]:
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


def spread(rng: random.Random, sentences: list[str], needles: list[str]) -> str:
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
    needles, question, answer = MAKERS[task](rng, length)
    head, tail = INSTRUCTIONS[task], question_tail(question)
    budget = length - len(head) - len(tail) - body_len(needles)
    prompt = head + spread(rng, fill(rng, budget), needles) + tail
    return {"text": f"{prompt} {answer}", "prompt": prompt, "answer": answer, "task": task}


def eval_prompts(task: str, length: int, n: int, seed: int) -> list[dict]:
    """n records of `task` with prompts of length - 64 to `length` characters (ASCII, so
    characters == byte tokens), needles at seeded random depths. Fields: prompt, answer, task,
    category, text. A pure function of its arguments (its own random stream)."""
    if task not in MAKERS:
        raise ValueError(f"unknown longctx task {task!r}; pick one of {', '.join(TASKS)}")
    need = min_length(task)
    if length < need:
        raise ValueError(f"length {length} is too short for longctx task {task!r}; "
                         f"use length >= {need}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}; pass the number of prompts wanted")
    rng = random.Random(f"edge_longctx-eval:{task}:{length}:{n}:{seed}")
    return [{**make_example(rng, task, length), "category": CATEGORIES[task]} for _ in range(n)]
