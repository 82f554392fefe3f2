"""The MeKi benchmarks from prepared TFDS datasets (``--data-dir tfds:<dir>``), as documents in the
Hugging Face published layout that :mod:`edge_jax.eval.benchmarks` formats (same field names and
value types), so the lm-eval formats are shared with the file-backed tasks.

``TFDS_TASKS`` maps each task to its TFDS 4.9.10 builder (``name/config``), the TFDS split for each
lm-eval split it uses, and a converter from a TFDS record (bytes for Text, ints for ClassLabel, a
dict of lists for a Sequence of dicts) to the published record. Where TFDS keeps less than the
published dataset, ``DEVIATIONS`` says what differs; SciQ and LAMBADA (OpenAI) are not read from
TFDS (``NOT_IN_TFDS`` says why). Every split is read
whole with ``tfds.data_source`` from array_record files (no TensorFlow needed) and nothing is
downloaded; a dataset that is not prepared is a one-line :class:`TaskError` naming the
``tfds build`` command. The converted documents are checked like the files' (:mod:`edge_jax.eval.validate`):
a record the task cannot score (an unlabelled one: TFDS's label -1) is a one-line error naming the
dataset, split, record index and field.

TFDS stores examples in its own (hashed-key) order, not the published files' order: the same
documents, so zero-shot scores are unaffected, but few-shot draws and ``--limit`` subsets differ
from lm-eval's (``ORDER_NOTE``).
"""
from __future__ import annotations

import os
import re
from typing import Callable

from edge_jax.errors import unknown
from edge_jax.eval.tasks import TaskError
from edge_jax.eval.validate import check_documents

TFDS_VERSION = "4.9.10"
# task -> why it is not read from TFDS (its files go in a data dir instead)
NOT_IN_TFDS = {"sciq": "it is not in TFDS " + TFDS_VERSION,
               "lambada_openai": "TFDS's lambada is the original lower-cased, tokenised release (lm-eval's "
                                 "lambada_standard), not OpenAI's detokenised test set"}
ORDER_NOTE = ("TFDS stores examples in hashed-key order, not the published order: zero-shot scores are "
              "unaffected; few-shot draws and --limit subsets differ from lm-eval's")


def _s(x) -> str:
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def _name(x, names: str | list[str]) -> str:
    """A ClassLabel index as its name ('' for TFDS's -1, an unlabelled test record)."""
    i = int(x)
    return names[i] if 0 <= i < len(names) else ""


def _arc(r: dict) -> dict:
    # TFDS rewrites the ~1% of numeric labels ("1".."5") as letters (the published data keeps the
    # digits); answerKey is rewritten the same way, so the gold position and the prompt are unchanged.
    return {"id": _s(r["id"]), "question": _s(r["question"]),
            "choices": {"text": [_s(t) for t in r["choices"]["text"]],
                        "label": [_name(i, "ABCDE") for i in r["choices"]["label"]]},
            "answerKey": _name(r["answerKey"], "ABCDE")}


def _boolq(r: dict) -> dict:
    return {"question": _s(r["question"]), "passage": _s(r["passage"]), "idx": int(r["idx"]),
            "label": int(r["label"])}


def _copa(r: dict) -> dict:
    return {"premise": _s(r["premise"]), "choice1": _s(r["choice1"]), "choice2": _s(r["choice2"]),
            "question": _s(r["question"]), "idx": int(r["idx"]), "label": int(r["label"])}


# ActivityNet contexts are ctx_a (whole sentences) + " " + ctx_b (the next sentence's opening noun
# phrase, e.g. "the man"); WikiHow ones have ctx_b == "". TFDS keeps only the joined `context`.
_CTX_SPLIT = re.compile(r"(.*[.!?]) (.+)", re.S)


def _hellaswag(r: dict) -> dict:
    # Re-split `context` into ctx_a/ctx_b (lm-eval capitalises ctx_b): for ActivityNet items that do
    # not end a sentence, at the last sentence end; otherwise ctx_b is "".
    ctx, source = _s(r["context"]), _s(r["source_id"])
    ctx_a, ctx_b = ctx, ""
    m = _CTX_SPLIT.fullmatch(ctx)
    if source.startswith("activitynet") and m and not ctx.rstrip().endswith((".", "!", "?")):
        ctx_a, ctx_b = m.group(1), m.group(2)
    return {"activity_label": _s(r["activity_label"]), "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": ctx,
            "endings": [_s(e) for e in r["endings"]], "label": str(int(r["label"])), "source_id": source,
            "split_type": _s(r["split_type"])}


def _openbookqa(r: dict) -> dict:
    # TFDS reads OpenBookQA's Additional/*_complete files (the main questions plus fact1 etc.) without the id.
    q = r["question"]
    return {"question_stem": _s(q["stem"]),
            "choices": {"text": [_s(q[f"choice_{c}"]) for c in "ABCD"], "label": list("ABCD")},
            "answerKey": _name(r["answerKey"], "ABCD"), "fact1": _s(r["fact1"])}


def _piqa(r: dict) -> dict:
    return {"goal": _s(r["goal"]), "sol1": _s(r["sol1"]), "sol2": _s(r["sol2"]), "label": int(r["label"])}


def _winogrande(r: dict) -> dict:
    return {"sentence": _s(r["sentence"]), "option1": _s(r["option1"]), "option2": _s(r["option2"]),
            "answer": _name(r["label"], ["1", "2"])}


# task -> (TFDS builder, {lm-eval split: TFDS split} (others pass through), converter)
TFDS_TASKS: dict[str, tuple[str, dict[str, str], Callable[[dict], dict]]] = {
    "arc_easy": ("ai2_arc/ARC-Easy", {"test": "test", "train": "train"}, _arc),
    "arc_challenge": ("ai2_arc/ARC-Challenge", {"test": "test", "train": "train"}, _arc),
    "boolq": ("super_glue/boolq", {"validation": "validation", "train": "train"}, _boolq),
    "copa": ("super_glue/copa", {"validation": "validation", "train": "train"}, _copa),
    "hellaswag": ("hellaswag", {"validation": "validation", "train": "train"}, _hellaswag),
    "openbookqa": ("openbookqa", {"test": "test", "train": "train"}, _openbookqa),
    "piqa": ("piqa", {"validation": "validation", "train": "train"}, _piqa),
    "winogrande": ("winogrande", {"validation": "validation", "train": "train_xl"}, _winogrande),
}

DEVIATIONS: dict[str, str] = {
    **{t: "TFDS rewrites numeric choice labels 1-5 as A-E (answerKey too): gold and prompts unchanged"
       for t in ("arc_easy", "arc_challenge")},
    "hellaswag": "TFDS keeps only the joined context; ctx_a/ctx_b are re-split at the last sentence end "
                 "(ActivityNet) so lm-eval's capitalised ctx_b is rebuilt; a context that breaks elsewhere "
                 "keeps ctx_b empty and its last phrase lower-case",
    "openbookqa": "TFDS drops the question id (the questions, choices and answers are main's)",
}


def _records(ds) -> list:
    n, get = len(ds), getattr(ds, "__getitems__", None)
    if get is None:
        return [ds[i] for i in range(n)]
    return [r for start in range(0, n, 4096) for r in get(list(range(start, min(n, start + 4096))))]


def read_tfds(tfds_dir: str, task: str, split: str) -> list[dict]:
    """Every document of ``task``'s lm-eval ``split`` from the TFDS datasets prepared in ``tfds_dir``,
    in the published Hugging Face layout."""
    if task in NOT_IN_TFDS:
        raise TaskError(f"{task} is not read from TFDS ({NOT_IN_TFDS[task]}); put its published files in a data dir "
                        "(docs/eval.md)")
    if task not in TFDS_TASKS:
        raise TaskError(unknown("TFDS task", task, TFDS_TASKS) + "; other tasks read a data dir (docs/eval.md)")
    import tensorflow_datasets as tfds

    name, splits, convert = TFDS_TASKS[task]
    tfds_split, path = splits.get(split, split), os.path.expanduser(str(tfds_dir))
    build = f"`tfds build {name} --data_dir={path} --file_format=array_record`"
    try:
        builder = tfds.builder(name, data_dir=path)
        prepared = builder.is_prepared()
    except Exception:  # noqa: BLE001 - not registered (its module needs TensorFlow) and not on disk there
        prepared = False
    if not prepared:
        raise TaskError(f"{task}: TFDS dataset '{name}' is not prepared in {path}; prepare it where there is "
                        f"network with {build} and copy it there, or pass the published files (docs/eval.md)")
    if tfds_split not in builder.info.splits:
        raise TaskError(f"{task}: TFDS dataset '{name}' in {path} has no split '{tfds_split}' (it has "
                        f"{', '.join(sorted(builder.info.splits))}); rebuild it with {build}")
    try:
        ds = tfds.data_source(name, split=tfds_split, data_dir=path, download=False)
    except NotImplementedError:
        raise TaskError(f"{task}: TFDS dataset '{name}' in {path} is not in array_record format, which reading "
                        f"without TensorFlow needs; rebuild it with {build}") from None
    docs = []
    for i, record in enumerate(_records(ds)):
        try:
            docs.append(convert(record))
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise TaskError(f"{task}: record {i} of TFDS '{name}' split '{tfds_split}' in {path} lacks what TFDS "
                            f"{TFDS_VERSION}'s {name} has ({type(e).__name__}: {e}); rebuild it with {build}") from None
    if not docs:
        raise TaskError(f"{task}: TFDS '{name}' split '{tfds_split}' in {path} is empty; rebuild it with {build}")
    check_documents(task, docs, lambda i: f"{task}: TFDS '{name}' split '{tfds_split}' in {path}, record index {i}",
                    fix=f"that split cannot be scored as it is; rebuild it with {build}, or pass the published "
                        "files (docs/eval.md)")
    return docs
