"""`edge-jax eval` of what is not a usable workdir, of damaged checkpoints (a reader falls back with one
warning and moves nothing), and zero-shot arguments that cannot work."""
import shutil

from cases_train import _other_tokenizer
from harness import Case, both, delete_part, make_dir, truncate


def _eval(*extra: str, workdir: str = "{base}") -> list[str]:
    return ["eval", "--workdir", workdir, "--batches", "1", *extra]


def _no_checkpoints(ctx):
    shutil.rmtree(ctx.base / "checkpoints")


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
]
