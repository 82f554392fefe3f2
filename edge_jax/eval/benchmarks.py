"""Ten published zero-shot benchmarks (ARC-E, ARC-C, BoolQ, COPA, HellaSwag, LAMBADA, OBQA,
PIQA, SciQ, WinoGrande; the set MeKi reports), in lm-evaluation-harness's formats (its task YAMLs, version in
``Task.version``), read from local files in their published layout (:mod:`edge_jax.eval.files`)
or from prepared TFDS datasets (``--data-dir tfds:<dir>``, :mod:`edge_jax.eval.tfds_tasks`).

``--tasks ten_benchmarks`` runs all ten (a paper may register its own name for the group in ``GROUPS``).
"""
from __future__ import annotations

import re

from edge_jax.eval.tasks import GROUPS, ZERO_SHOT_TASKS, Format, Task
from edge_jax.eval.validate import Choices, Index, Key, Labels, Text

TFDS_PREFIX = "tfds:"


def _loader(name: str, fields: tuple[str, ...]):
    def load(source: str, split: str) -> list[dict]:
        if str(source).startswith(TFDS_PREFIX):
            from edge_jax.eval.tfds_tasks import read_tfds
            return read_tfds(source[len(TFDS_PREFIX):], name, split)
        from edge_jax.eval.files import read_split
        return read_split(source, name, split, fields)
    return load


def _register(name: str, fmt: Format, schema: tuple, eval_split: str, fewshot_split: str | None,
              version: str, description: str = "") -> None:
    """One benchmark; ``schema`` lists what its format reads, checked in this order (a count or label
    field before what refers to it); the loader requires those fields."""
    fields = tuple(c.field for c in schema)
    ZERO_SHOT_TASKS.register(name, Task(name, fmt, _loader(name, fields), eval_split, fewshot_split,
                                        f"lm-eval {name} v{version}", description=description, schema=schema))


def _arc(question: str) -> tuple:
    return (Text(question), Choices("choices.text"), Labels("choices.label", "choices.text"),
            Key("answerKey", "choices.label"))


def _last_word(text: str) -> bool:
    words = text.split(" ")
    return len(words) > 1 and bool(words[-1]) and bool(" ".join(words[:-1]).strip())


# ARC (allenai/ai2_arc), OpenBookQA (allenai/openbookqa): letter- or digit-labelled choices.
def _arc_gold(doc: dict, key: str = "answerKey") -> int:
    return list(doc["choices"]["label"]).index(str(doc[key]).lstrip())


for _name in ("arc_easy", "arc_challenge"):
    _register(_name, Format("multiple_choice", lambda d: f"Question: {d['question']}\nAnswer:", _arc_gold,
                            lambda d: list(d["choices"]["text"])),
              _arc("question"), "test", "train", "1.0",
              description=f"AI2 ARC {'Easy' if _name == 'arc_easy' else 'Challenge'}")

_register("boolq", Format("multiple_choice", lambda d: f"{d['passage']}\nQuestion: {d['question']}?\nAnswer:",
                          lambda d: int(d["label"]), lambda d: ["no", "yes"]),
          (Text("passage"), Text("question"), Index("label", 2)), "validation", "train", "2.0",
          description="SuperGLUE BoolQ")


def _lower_first(choice: str) -> str:
    return choice[0].lower() + choice[1:]


_register("copa", Format(
    "multiple_choice",
    lambda d: d["premise"].strip()[:-1] + " " + {"cause": "because", "effect": "therefore"}[d["question"]],
    lambda d: int(d["label"]),
    lambda d: [" " + _lower_first(d["choice1"]), " " + _lower_first(d["choice2"])]),
    (Text("premise"), Text("choice1"), Text("choice2"),
     Text("question", rule=(lambda q: q in ("cause", "effect"), '"cause" or "effect"')), Index("label", 2)),
    "validation", "train", "1.0", description="SuperGLUE COPA")


def _hellaswag_clean(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


def _hellaswag_query(doc: dict) -> str:
    return _hellaswag_clean(doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize())


_register("hellaswag", Format("multiple_choice", _hellaswag_query, lambda d: int(d["label"]),
                              lambda d: [_hellaswag_clean(e) for e in d["endings"]]),
          (Text("activity_label"), Text("ctx_a", empty=True), Text("ctx_b", empty=True), Choices("endings"),
           Index("label", "endings", noun="endings")), "validation", "train", "1.0",
          description="HellaSwag")

_register("lambada_openai", Format("loglikelihood", lambda d: " ".join(d["text"].split(" ")[:-1]),
                                   lambda d: " " + d["text"].split(" ")[-1], target_delimiter=""),
          (Text("text", rule=(_last_word, "a passage whose last word (after its last space) is the word to predict")),),
          "test", None, "1.0", description="LAMBADA (OpenAI's detokenised test set)")

_register("openbookqa", Format("multiple_choice", lambda d: d["question_stem"], _arc_gold,
                               lambda d: list(d["choices"]["text"])),
          _arc("question_stem"), "test", "train", "1.0",
          description="OpenBookQA (main)")

_register("piqa", Format("multiple_choice", lambda d: f"Question: {d['goal']}\nAnswer:", lambda d: int(d["label"]),
                         lambda d: [d["sol1"], d["sol2"]]),
          (Text("goal"), Text("sol1"), Text("sol2"), Index("label", 2)), "validation", "train", "1.0",
          description="PIQA")

_register("sciq", Format("multiple_choice", lambda d: f"{d['support'].lstrip()}\nQuestion: {d['question']}\nAnswer:",
                         lambda d: 3, lambda d: [d["distractor1"], d["distractor2"], d["distractor3"],
                                                 d["correct_answer"]]),
          (Text("support", empty=True), Text("question"), Text("distractor1"), Text("distractor2"),
           Text("distractor3"), Text("correct_answer")), "test", "train", "1.0", description="SciQ")


def _blank(doc: dict) -> int:
    return doc["sentence"].index("_")


_register("winogrande", Format(
    "multiple_input",
    lambda d: {"1": 0, "2": 1}[str(d["answer"])],
    lambda d: d["sentence"][_blank(d) + 1:].strip(),
    lambda d: [d["sentence"][:_blank(d)] + d["option1"], d["sentence"][:_blank(d)] + d["option2"]]),
    (Text("sentence", rule=(lambda s: "_" in s, "a sentence with a '_' blank for the options")),
     Text("option1"), Text("option2"), Index("answer", 2, first=1, noun="options")), "validation", "train", "1.0",
    description="WinoGrande (winogrande_xl)")

TEN_BENCHMARKS = ("arc_easy", "arc_challenge", "boolq", "copa", "hellaswag", "lambada_openai", "openbookqa", "piqa",
          "sciq", "winogrande")
GROUPS["ten_benchmarks"] = TEN_BENCHMARKS
