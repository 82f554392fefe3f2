"""`edge-jax eval` of what is not a usable workdir, of damaged checkpoints (a reader falls back with one
warning and moves nothing), zero-shot arguments that cannot work, and task files that cannot be read
(not UTF-8, gzip under a plain name, a truncated .gz)."""
import gzip
import json
import shutil

from cases_data import CLAIMED
from cases_train import _other_tokenizer
from harness import Case, both, delete_part, make_dir, train, truncate, write_file


def _eval(*extra: str, workdir: str = "{base}") -> list[str]:
    return ["eval", "--workdir", workdir, "--batches", "1", *extra]


def _no_checkpoints(ctx):
    shutil.rmtree(ctx.base / "checkpoints")


def _piqa_bytes(*, latin1: bool = False) -> bytes:
    """PIQA's validation split as JSON lines, three records (the second's goal in Latin-1 if ``latin1``)."""
    docs = [{"goal": f"open the jar {i}", "sol1": "twist the lid", "sol2": "hit it", "label": i % 2} for i in range(3)]
    lines = [json.dumps(d).encode() for d in docs]
    if latin1:
        lines[1] = json.dumps({**docs[1], "goal": "ouvrir le bocal \u00e9"}, ensure_ascii=False).encode("latin-1")
    return b"".join(line + b"\n" for line in lines)


def _zero_shot(task: str = "piqa") -> list[str]:
    return _eval("--tasks", task, "--data-dir", "{tmp}/tasks")


PIQA = "tasks/piqa/validation.jsonl"
READ_FALLBACK = ("warning: checkpoint step 8 in ", "using step 4")
TRAINED = {"base": "trained"}
CASES = [
    Case("eval_dir_not_a_workdir", _eval(workdir="{tmp}"), ("config.json not found", "run `edge-jax train` first")),
    Case("eval_dir_missing", _eval(workdir="{tmp}/nope"), ("nope", "edge-jax train")),
    Case("eval_workdir_without_checkpoints", _eval(), "no checkpoint in ", setup=_no_checkpoints, **TRAINED),
    Case("eval_workdir_other_tokenizer", _eval(), "was trained with tokenizer spm-0123456789ab",
         setup=_other_tokenizer(), **TRAINED),
    Case("eval_truncated_latest_step", _eval(), READ_FALLBACK, code=0, setup=truncate(8), **TRAINED),
    Case("eval_deleted_part_of_latest_step", _eval(), READ_FALLBACK, code=0, setup=delete_part(8), **TRAINED),
    Case("eval_every_step_damaged", _eval(), "delete that directory", setup=both(truncate(8), delete_part(4)),
         **TRAINED),
    Case("eval_split_unknown", _eval("--split", "nope"), "has no split 'nope'", **TRAINED),
    Case("eval_qa_without_questions", _eval("--qa"), "has no question split", **TRAINED),
    # zero-shot tasks
    Case("eval_task_unknown", _eval("--tasks", "facts_mcq"), "unknown zero-shot task 'facts_mcq'; did you mean",
         **TRAINED),
    Case("eval_task_needs_data_dir", _eval("--tasks", "hellaswag"), "pass --data-dir", **TRAINED),
    Case("eval_task_data_dir_empty", _eval("--tasks", "hellaswag", "--data-dir", "{tmp}/tasks"),
         ("hellaswag: no 'validation' split at", "tasks/hellaswag"),
         setup=make_dir("tasks"), **TRAINED),
    Case("eval_batch_size_zero", _eval("--tasks", "code_cloze", "--batch-size", "0"), ("--batch-size", "0"),
         **TRAINED),
    Case("eval_fewshot_negative", _eval("--tasks", "code_cloze", "--num-fewshot", "-1"), ("--num-fewshot", "-1"),
         **TRAINED),
    # task files that cannot be read
    Case("eval_task_file_latin1_line", _zero_shot(), ("validation.jsonl line 2 is not UTF-8 text (byte 0xe9",
                                                      "re-encode it as UTF-8"),
         setup=write_file(PIQA, _piqa_bytes(latin1=True)), **TRAINED),
    Case("task_file_latin1_line_before_training", train("--config.eval.zero_shot=piqa",
                                                        "--config.eval.data_dir={tmp}/tasks"),
         "validation.jsonl line 2 is not UTF-8 text", setup=write_file(PIQA, _piqa_bytes(latin1=True)),
         changes=CLAIMED),
    Case("eval_task_file_gzip_named_jsonl", _zero_shot(), ("validation.jsonl is gzip-compressed",
                                                           "rename it to validation.jsonl.gz"),
         setup=write_file(PIQA, gzip.compress(_piqa_bytes())), **TRAINED),
    Case("eval_task_file_gz_truncated", _zero_shot(), ("validation.jsonl.gz is a truncated gzip file",
                                                       "download it again"),
         setup=write_file(PIQA + ".gz", gzip.compress(_piqa_bytes() * 20)[:-20]), **TRAINED),
]
