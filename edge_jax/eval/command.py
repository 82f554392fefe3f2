"""``edge-jax eval --workdir W --tasks ...``: zero-/few-shot scores of a workdir's latest checkpoint.

Writes ``W/eval/<task>.json`` (``W/eval_folded/`` with ``--fold``: the model's inference form, as its
memory kind defines it; :mod:`edge_jax.models.inference`) and prints a table with the average and
chance level.
"""
from __future__ import annotations

import os

from edge_jax.eval.tasks import TaskError
from edge_jax.utils.args import at_least, count, output_dir


def add_arguments(p) -> None:
    """The zero-shot flags of ``edge-jax eval``."""
    p.add_argument("--tasks", default="", help="zero-shot tasks or groups, comma-separated: facts_mc, code_cloze, "
                   "longctx_mc (group builtin), ten published benchmarks (group ten_benchmarks: arc_easy, "
                   "arc_challenge, boolq, copa, hellaswag, lambada_openai, openbookqa, piqa, sciq, winogrande); "
                   "skips the validation loss")
    p.add_argument("--data-dir", default="", help="where the benchmarks' published files lie (DIR/<task>/<split>.jsonl "
                   "or .parquet; docs/eval.md), or tfds:DIR for prepared TFDS datasets")
    p.add_argument("--num-fewshot", type=at_least(0), default=0, help="solved examples before each document (seeded)")
    p.add_argument("--limit", type=at_least(0), default=0, help="score the first N documents of each task (0 = all)")
    p.add_argument("--max-length", type=at_least(0), default=0, help="longest input in tokens, contexts truncated "
                   "from the left (0 = the run's data.seq_len)")
    p.add_argument("--batch-size", type=count, default=16, help="rows per scoring batch")
    p.add_argument("--no-truncate", action="store_true", help="refuse a request longer than --max-length instead "
                   "of truncating its context from the left")
    p.add_argument("--fold", action="store_true", help="score the model's inference form, as its memory kind "
                   "defines it (models/inference.py), into W/eval_folded/")


def zero_shot_workdir(args) -> dict:
    """Score ``args.tasks`` on the newest checkpoint of ``args.workdir``; the summary metrics."""
    from edge_jax.eval.evaluator import check_tasks, make_scorer
    from edge_jax.eval.suite import run_tasks
    from edge_jax.eval.tasks import BuiltinSource
    from edge_jax.train.evaluate import restore_latest
    out_dir = os.path.join(args.workdir, "eval_folded" if args.fold else "eval")
    output_dir(out_dir, "--workdir")  # the scores are written there
    check_tasks(args.tasks, args.data_dir, args.num_fewshot)  # before the checkpoint is read
    run, state, step = restore_latest(args.workdir)
    model, params = run.model, state.params
    if args.fold:
        from edge_jax.models import DecoderLM
        from edge_jax.models.inference import InferenceFormError, has_inference_form, inference_form
        if not has_inference_form(model.cfg):
            raise TaskError(f"--fold: model.memory={model.cfg.memory!r} has no inference form other than the "
                            "trained model; drop --fold")
        try:
            params, cfg = inference_form(params, model.cfg)
        except InferenceFormError as e:
            raise TaskError(f"--fold: {e}") from None
        model = DecoderLM(cfg)
    max_length = args.max_length or run.config.data.seq_len
    scorer = make_scorer(model, params, run.tokenizer, max_length, args.batch_size, run.mesh,
                         truncate=not args.no_truncate)
    summary = run_tasks(scorer, args.tasks, data_dir=args.data_dir,
                        builtin=BuiltinSource(run.config.data, run.tokenizer, max_length),
                        num_fewshot=args.num_fewshot, limit=args.limit, out_dir=out_dir,
                        info={"step": step, "workdir": os.path.abspath(args.workdir),
                              "form": "folded" if args.fold else "train"})
    return {"step": step, **summary}
