"""Checks of zero-shot task documents as they load, before anything is scored.

Every task names, in its ``Task.schema`` (a tuple of the checks below), what its prompt format reads
from a document and what each field must hold: text (a string; non-empty where a prompt needs it),
choices (a non-empty list of non-empty strings), a gold index (an integer, or a string of one where
the published data has strings, within the number of choices), a gold key among the choice labels
(ARC, OpenBookQA). After the fields, the task's :class:`~edge_jax.eval.tasks.Format` builds the
document's requests and the result is checked too: every choice non-empty text, the gold index among
the choices.

:func:`check_documents` runs the checks over a split's documents; the loaders (task files,
TFDS datasets, built-in constructions) call it with where each document came from, so the first
document that fails is a one-line :class:`RecordError` naming its file and line (or source and
record index), the field, what it holds and what is wanted, e.g.::

    /data/piqa/validation.jsonl line 3: field 'label' is 5, but there are 2 choices (0 or 1); fix or remove that record
"""
from __future__ import annotations

import dataclasses
import json
import numbers
import re
from typing import Any, Callable, Sequence

from edge_jax.errors import one_line
from edge_jax.eval.tasks import ZERO_SHOT_TASKS, Format, TaskError

FIX = "fix or remove that record"
_MISSING = object()
_INTEGER = re.compile(r"-?\d+")


class RecordError(TaskError):
    """A task document that cannot be scored as it is: one line naming where it is (file and line,
    or source and record index), the field, what it holds and what is wanted."""


def show(value: Any, limit: int = 60) -> str:
    """``value`` as JSON writes it (null, "x", 5, []), cut to ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def lookup(record: dict, field: str) -> tuple[Any, str | None]:
    """``(value, None)`` for a dotted ``field`` (``choices.text``) of ``record``, or
    ``(_MISSING, problem)`` when it is absent or a parent is not an object."""
    node, parts = record, field.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            parent = ".".join(parts[:depth])
            return _MISSING, f"field {parent!r} is {show(node)}, but it must be an object with a field {part!r}"
        if part not in node:
            have = ", ".join(sorted(map(str, node))) or "none"
            where = f"field {'.'.join(parts[:depth])!r} " if depth else "the record "
            return _MISSING, f"{where}has no field {part!r} (it has {have})"
        node = node[part]
    return node, None


# ---- what a field must hold: each check returns None, or what is wrong ("is 5, but ...") ----

@dataclasses.dataclass(frozen=True)
class Text:
    """A string; non-whitespace unless ``empty``; ``rule``: (test, what is wanted) for more."""
    field: str
    empty: bool = False
    rule: tuple[Callable[[str], bool], str] | None = None

    def problem(self, value: Any, record: dict) -> str | None:
        wanted = "text (a string)" if self.empty else "non-empty text"
        if not isinstance(value, str):
            return f"is {show(value)}, but it must be {wanted}"
        if not self.empty and not value.strip():
            return f"is {show(value)}, but it must be {wanted}"
        if self.rule and not self.rule[0](value):
            return f"is {show(value)}, but it must be {self.rule[1]}"
        return None


@dataclasses.dataclass(frozen=True)
class Choices:
    """A non-empty list of non-empty strings."""
    field: str

    def problem(self, value: Any, record: dict) -> str | None:
        if not isinstance(value, (list, tuple)) or not value:
            return f"is {show(value)}, but it must be a non-empty list of non-empty strings (the choices)"
        for i, choice in enumerate(value):
            if not isinstance(choice, str) or not choice.strip():
                return f"item {i} is {show(choice)}, but every choice must be non-empty text"
        return None


@dataclasses.dataclass(frozen=True)
class Labels:
    """The labels of a :class:`Choices` field ``of``: distinct non-empty strings, one per choice."""
    field: str
    of: str

    def problem(self, value: Any, record: dict) -> str | None:
        n = len(lookup(record, self.of)[0])
        if not isinstance(value, (list, tuple)) or any(not isinstance(v, str) or not v.strip() for v in value):
            return f"is {show(value)}, but it must be a list of {n} non-empty strings, one label per choice"
        if len(value) != n:
            return f"has {len(value)} labels, but field {self.of!r} has {n} choices"
        if len(set(value)) != len(value):
            return f"is {show(value)}, but the labels must be distinct"
        return None


@dataclasses.dataclass(frozen=True)
class Index:
    """The gold choice's number: an integer (or a string of one), from ``first`` on, below the
    number of choices: ``count``, or the length of the :class:`Choices` field it names."""
    field: str
    count: int | str
    first: int = 0
    noun: str = "choices"

    def problem(self, value: Any, record: dict) -> str | None:
        n = self.count if isinstance(self.count, int) else len(lookup(record, self.count)[0])
        last = self.first + n - 1
        allowed = str(last) if n == 1 else f"{self.first} or {last}" if n == 2 else f"{self.first} to {last}"
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if not integral and not (isinstance(value, str) and _INTEGER.fullmatch(value)):
            return f"is {show(value)}, but it must be the right {self.noun[:-1]}'s number, an integer ({allowed})"
        if not self.first <= int(value) <= last:
            return f"is {show(value)}, but there are {n} {self.noun} ({allowed})"
        return None


@dataclasses.dataclass(frozen=True)
class Key:
    """The gold choice's label: a string (or integer) that is one of the :class:`Labels` field ``labels``
    (leading spaces ignored, as lm-eval does)."""
    field: str
    labels: str

    def problem(self, value: Any, record: dict) -> str | None:
        labels = list(lookup(record, self.labels)[0])
        among = f"one of the choice labels {', '.join(labels)} (field {self.labels!r})"
        usable = isinstance(value, (str, numbers.Integral)) and not isinstance(value, bool)
        if not usable or str(value).lstrip() not in labels:
            return f"is {show(value)}, but it must be {among}"
        return None


Check = Text | Choices | Labels | Index | Key


def schema(task: str) -> tuple | None:
    """The checks of a registered ``task`` (its ``Task.schema``), None for a task without any."""
    return (ZERO_SHOT_TASKS.get(task).schema or None) if task in ZERO_SHOT_TASKS else None


def fields(task: str) -> tuple[str, ...]:
    """The fields ``task``'s format reads (its schema's), in order."""
    return tuple(c.field for c in schema(task) or ())


def _format_problem(fmt: Format, doc: dict) -> str | None:
    """What is wrong with the requests ``fmt`` builds from ``doc`` (None: nothing)."""
    try:
        requests = fmt.requests(doc)
        gold = fmt.gold(doc)
        choices = fmt.choices(doc) if fmt.choices else None
    except Exception as e:  # noqa: BLE001  (any failure of the format is this record's problem)
        return f"the {fmt.kind} prompt format cannot read it ({type(e).__name__}: {one_line(e)})"
    if not requests or any(not isinstance(s, str) for pair in requests for s in pair):
        return f"the prompt format builds {show(requests)} from it, not (context, continuation) strings"
    if choices is not None:
        if not 0 <= gold < len(choices):
            return f"its gold index {gold} is not among its {len(choices)} choices"
        for i, c in enumerate(choices):
            if not isinstance(c, str) or not c.strip():
                return f"choice {i} is {show(c)} in the prompt, but every choice must be non-empty text"
    return None


def problem(task: str, doc: Any, required: Sequence[str] = ()) -> str | None:
    """What is wrong with one document of ``task`` (None: nothing): its schema's fields in order (for
    a task without a schema, only that the ``required`` fields are present), then the requests its
    format builds."""
    if not isinstance(doc, dict):
        return f"is {show(doc)}, not an object with the task's fields"
    checks = schema(task)
    layout = ", ".join(fields(task) if checks is not None else required)
    for field, check in [(c.field, c) for c in checks] if checks is not None else [(f, None) for f in required]:
        value, missing = lookup(doc, field)
        if missing:
            return f"{missing}; the {task} layout needs {layout}"
        wrong = check.problem(value, doc) if check is not None else None
        if wrong:
            return f"field {field!r} {wrong}"
    return _format_problem(ZERO_SHOT_TASKS.get(task).format, doc) if task in ZERO_SHOT_TASKS else None


def check_documents(task: str, docs: Sequence[Any], where: Callable[[int], str], fix: str = FIX,
                    required: Sequence[str] = ()) -> None:
    """A :class:`RecordError` for the first document of ``task`` that fails :func:`problem`, naming
    ``where(i)`` (its file and line, or source and record) and ``fix``, and how many others fail."""
    first, others = None, 0
    for i, doc in enumerate(docs):
        wrong = problem(task, doc, required)
        if wrong and first is None:
            first = f"{where(i)}: {wrong}; {fix}"
        elif wrong:
            others += 1
    if first is not None:
        more = f" ({others} more record{'s' if others > 1 else ''} of this split fail{'' if others > 1 else 's'} " \
               "these checks)" if others else ""
        raise RecordError(first + more)
