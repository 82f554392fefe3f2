"""Zero-/few-shot tasks as lm-evaluation-harness defines them, and the requests they make.

A task is a :class:`Format` (lm-eval's ``doc_to_text`` / ``doc_to_choice`` / ``doc_to_target`` and
its delimiters) plus where its documents come from. Three output kinds, as in lm-eval:

  multiple_choice   one context, one continuation per choice: ``(ctx, delim + choice_i)``;
                    ``acc`` = argmax of the summed log-likelihoods, ``acc_norm`` = argmax of
                    log-likelihood / ``len(choice_i)`` (lm-eval's code divides by characters,
                    which are bytes for ASCII; ``acc_bytes`` divides by UTF-8 bytes).
  multiple_input    one context per choice, one shared continuation (WinoGrande's partial
                    scoring: the option substituted into the sentence, the suffix scored):
                    ``(ctx_i, delim + target)``; ``text(doc)`` is the gold index.
  loglikelihood     one request ``(ctx, delim + target)`` (LAMBADA): ``acc`` = the target is the
                    greedy continuation, ``perplexity`` = exp(-mean log-likelihood).

Few-shot contexts are lm-eval's: each shot is ``text + delim + answer`` followed by ``"\\n\\n"``,
then the document's text (for multiple_input the shot's text is its gold choice, the answer its
target). Shots are drawn without replacement from the task's few-shot split with
``random.Random(seed)``, excluding the document itself when both come from the same split.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Iterable, Sequence

from edge_jax import plugins
from edge_jax.errors import UserError, unknown
from edge_jax.registry import Registry

KINDS = ("multiple_choice", "multiple_input", "loglikelihood")
FEWSHOT_DELIMITER = "\n\n"


class TaskError(UserError, ValueError):
    """A task that cannot run as asked: one line naming the problem and the fix."""


@dataclasses.dataclass(frozen=True)
class Format:
    """How a document becomes text. ``text(doc)``: the context (the gold index for multiple_input);
    ``choices(doc)``: the options (None for loglikelihood); ``target(doc)``: the gold index
    (multiple_choice) or the target string (multiple_input, loglikelihood)."""
    kind: str
    text: Callable[[dict], Any]
    target: Callable[[dict], Any]
    choices: Callable[[dict], list[str]] | None = None
    target_delimiter: str = " "

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(unknown("task kind", self.kind, KINDS))

    def gold(self, doc: dict) -> int:
        return int(self.text(doc) if self.kind == "multiple_input" else self.target(doc)
                   if self.kind == "multiple_choice" else 0)

    def shot(self, doc: dict) -> str:
        """A solved example as a few-shot block (without the trailing delimiter)."""
        if self.kind == "multiple_input":
            return self.choices(doc)[self.gold(doc)] + self.target_delimiter + self.target(doc)
        answer = self.choices(doc)[self.gold(doc)] if self.kind == "multiple_choice" else self.target(doc)
        return self.text(doc) + self.target_delimiter + answer

    def requests(self, doc: dict, prefix: str = "") -> list[tuple[str, str]]:
        """The (context, continuation) pairs lm-eval builds for ``doc`` after a few-shot ``prefix``."""
        d = self.target_delimiter
        if self.kind == "multiple_choice":
            return [(prefix + self.text(doc), d + c) for c in self.choices(doc)]
        if self.kind == "multiple_input":
            return [(prefix + c, d + self.target(doc)) for c in self.choices(doc)]
        return [(prefix + self.text(doc), d + self.target(doc))]

    def norm_lengths(self, doc: dict) -> list[tuple[int, int]]:
        """(characters, UTF-8 bytes) per choice: what acc_norm and acc_bytes divide by."""
        return [(len(c), len(c.encode("utf-8"))) for c in (self.choices(doc) if self.choices else [""])]


@dataclasses.dataclass(frozen=True)
class Task:
    """A registered task. ``load(source, split) -> list[dict]`` reads its documents (``source`` is
    what ``edge-jax eval`` was given: a data dir, ``tfds:<dir>``, or the run for built-in tasks; every
    loader checks the documents with :func:`edge_jax.eval.validate.check_documents`, so a document
    the format cannot score is an error naming where it is, never a wrong score);
    ``eval_split`` is scored, ``fewshot_split`` supplies shots (None: no few-shot); ``version``
    names the prompt format (lm-eval's task and version for the ten published benchmarks); ``schema``:
    what the format reads from a document, checked in order as it loads (:mod:`edge_jax.eval.validate`'s
    checks; empty: only the loader's required fields). Chance level is computed from the documents (the
    mean of 1 / number of choices)."""
    name: str
    format: Format
    load: Callable[[Any, str], list[dict]]
    eval_split: str
    fewshot_split: str | None
    version: str
    builtin: bool = False
    description: str = ""
    schema: tuple = ()


@dataclasses.dataclass(frozen=True)
class BuiltinSource:
    """What the built-in tasks build their documents from: the run's ``data`` config (data dir,
    facts corpus size), its tokenizer, and ``max_length``, the longest input in tokens."""
    data_cfg: Any
    tokenizer: Any
    max_length: int


@dataclasses.dataclass(frozen=True)
class Example:
    """One scored document: its requests, the gold index, and per-choice normalising lengths."""
    requests: tuple[tuple[str, str], ...]
    gold: int
    lengths: tuple[tuple[int, int], ...]


ZERO_SHOT_TASKS: Registry[Task] = Registry("zero-shot task")
# Names that stand for several tasks: `--tasks ten_benchmarks` runs the ten published benchmarks
# (edge_jax.eval.benchmarks); papers may add their own names (registered on import, found by expand).
GROUPS: dict[str, tuple[str, ...]] = {}


def expand(names: str | Iterable[str]) -> list[str]:
    """Task names with groups expanded, in order, each once; unknown names are a TaskError naming
    the nearest ones."""
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not items:
        raise TaskError("no zero-shot task named; pass --tasks facts_mc,code_cloze or --tasks ten_benchmarks")
    if any(n not in GROUPS for n in items):
        plugins.load()  # a group a paper registers on import
    out: list[str] = []
    for name in items:
        for n in GROUPS.get(name, (name,)):
            if n not in ZERO_SHOT_TASKS:
                raise TaskError(unknown("zero-shot task", n, list(ZERO_SHOT_TASKS.names()) + list(GROUPS)))
            if n not in out:
                out.append(n)
    return out


def fewshot_prefix(fmt: Format, pool: Sequence[dict], k: int, rng: random.Random,
                   exclude: dict | None = None) -> str:
    """``k`` shots from ``pool`` (without ``exclude``), lm-eval's layout."""
    if k == 0:
        return ""
    candidates = [d for d in pool if d is not exclude] if exclude is not None else list(pool)
    shots = rng.sample(candidates, k)
    return "".join(fmt.shot(d) + FEWSHOT_DELIMITER for d in shots)


def build_examples(task: Task, docs: Sequence[dict], shots: Sequence[dict] = (), k: int = 0,
                   seed: int = 1234) -> list[Example]:
    """Every document's requests after ``k`` seeded shots from ``shots``."""
    if k and len(shots) - (shots is docs) < k:
        raise TaskError(f"--num-fewshot {k} is larger than the {len(shots)} documents of {task.name}'s "
                        f"'{task.fewshot_split}' split; lower --num-fewshot")
    rng = random.Random(seed)
    fmt = task.format
    out = []
    for doc in docs:
        prefix = fewshot_prefix(fmt, shots, k, rng, exclude=doc if shots is docs else None)
        out.append(Example(tuple(fmt.requests(doc, prefix)), fmt.gold(doc), tuple(fmt.norm_lengths(doc))))
    return out
