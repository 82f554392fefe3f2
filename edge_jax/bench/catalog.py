"""The core benchmarks as ``edge-jax bench`` lists and parses them: each one's help, its own flags and
defaults, and the ``"module:function"`` that measures (:class:`edge_jax.bench.Benchmark`).

This module imports no JAX (``edge-jax bench --help`` reads it); each benchmark's measuring module is
imported when it runs. A core benchmark is its measuring module (``run(args, overrides) -> str``) plus
one declaration here: its flags function and a ``BENCHMARKS.register(...)`` line. The papers declare
theirs the same way in their ``cli.py``.
"""
from __future__ import annotations

import argparse
import tempfile

from edge_jax.bench import Benchmark
from edge_jax.registry import BENCHMARKS
from edge_jax.utils.args import at_least, count, non_negative, positive

KERNEL_CALLS = 20  # kernels: queued calls per timed sample (--calls)
EVAL_TASKS = ("short_mc", "long_context", "lambada")  # eval: its request sets (--task)


def _checkpoint_arguments(group) -> None:
    # --config and --steps (train steps per timed round) are train-step's flags, read here too
    group.add_argument("--every", type=count, default=10, help="steps between checkpoints in the async-save "
                       "rounds (also reads --config and --steps)")
    group.add_argument("--dir", default=tempfile.gettempdir(), help="where the temporary checkpoints go")


BENCHMARKS.register("checkpoint", Benchmark(
    help="checksummed against plain save and restore, async saves every --every steps against none "
         "(ratios; also takes --repeats)", run="edge_jax.bench.checkpoint:run", add_arguments=_checkpoint_arguments))


def _listed(parse_one, example: str):
    """An argparse type: a comma-separated list, each item through ``parse_one`` (a ValueError or
    KeyError refuses the whole flag in one line that shows ``example``)."""
    def parse(text: str) -> list:
        try:
            return [parse_one(item.strip()) for item in text.split(",")]
        except (ValueError, KeyError, IndexError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"needs a comma-separated list such as {example}, got {text!r}") from None
    parse.__name__ = "list"
    return parse


def _size(text: str) -> int:
    from edge_jax.bench.corpus import parse_size
    size = parse_size(text)
    if size < 1:
        raise ValueError(text)
    return size


def _one_of(*names: str):
    return lambda text: names[names.index(text)]


def _data_arguments(g) -> None:
    g.add_argument("--sizes", type=_listed(_size, "100M,1G,3G"), default="100M,1G,3G",
                   help="corpus sizes in bytes of text (default 100M,1G,3G)")
    g.add_argument("--formats", type=_listed(_one_of("jsonl", "parquet"), "jsonl,parquet"), default="jsonl,parquet",
                   help="corpus formats (default jsonl,parquet)")
    g.add_argument("--tokenizers", type=_listed(_one_of("byte", "spm", "hf"), "byte,spm,hf"), default="byte,spm,hf",
                   help="byte, spm, hf (default all three)")
    g.add_argument("--workers", type=_listed(at_least(0), "1,2"), default="1,2",
                   help="grain worker counts of the iterator (default 1,2; 0: in-process)")
    g.add_argument("--tokens", type=positive, default=100e6, help="most tokens timed per measurement (default 100M)")
    g.add_argument("--seconds", type=positive, default=10.0, help="most seconds timed per measurement (default 10)")
    g.add_argument("--warmup", type=non_negative, default=2.0, help="seconds read after the first batch before "
                   "timing (drains what was prefetched meanwhile; default 2)")
    g.add_argument("--segments", type=count, default=5, help="timed stretches per measurement, for the min..max")
    g.add_argument("--corpus-dir", default="", help="where corpora and tokenizers are cached "
                   "(default $EDGE_JAX_DATA/bench/corpora, else ~/.cache/edge_jax/bench/corpora)")
    g.add_argument("--seq-len", type=count, default=2048, help="tokens per row (default 2048)")
    g.add_argument("--batch-size", type=count, default=8, help="rows per batch (default 8; --batch is the shared "
                   "decode-batch flag of the model benchmarks)")
    g.add_argument("--seed", type=at_least(0), default=0, help="corpus seed (default 0)")
    g.add_argument("--timeout", type=positive, default=900, help="seconds before a measurement is abandoned")
    g.add_argument("--shards", type=_listed(str, "gs://bucket/bench,/mnt/nfs/bench"), default=[],
                   help="instead of the streams: read prepared shards of the first --sizes corpus from this disk and "
                        "from a copy at each of these places (directories or gs:// URLs), reads per batch and "
                        "tokens/s (edge_jax/bench/shard_reads.py)")
    g.add_argument("--windows-per-read", type=_listed(at_least(1), "1,8"), default="1,8",
                   help="with --shards: data.windows_per_read values, consecutive windows a read (default 1,8)")


BENCHMARKS.register("data", Benchmark(
    help="the streamed train iterator against a minimal pyarrow + tokenizer loop over generated corpora "
         "(default 100M, 1G, 3G; JSONL and parquet; byte, spm, hf): tokens/s, peak memory, first-batch time, "
         "1 and 2 grain workers",
    run="edge_jax.bench.data:run", add_arguments=_data_arguments, defaults={"repeats": 1}, writes_json=True))


def _eval_arguments(group) -> None:
    group.add_argument("--task", action="append", choices=EVAL_TASKS, default=None,
                       help="only this task (repeatable); default: all three")
    group.add_argument("--requests", type=count, default=192, help="requests per task (default 192)")
    group.add_argument("--eval-batch", type=count, default=16, help="rows per model call, both sides (default 16)")
    group.add_argument("--max-length", type=at_least(64), default=512,
                       help="longest input in tokens, both sides (default 512)")
    group.add_argument("--threads", choices=("1", "all"), default="1",
                       help="threads of torch and of XLA alike: 1 (default) or all (every core)")
    group.add_argument("--fixtures", default=None, help="the parity fixtures directory (default: the checkout's "
                       "tests/eval/lm_eval_fixtures)")


BENCHMARKS.register("eval", Benchmark(
    help="our zero-shot scorer against lm-evaluation-harness's HF model on a tiny Qwen3 (requests/s, ratio; needs "
         "the lm-eval extra); also takes --repeats", run="edge_jax.bench.eval:run", add_arguments=_eval_arguments,
    defaults={"repeats": 3}, writes_json=True))


def _import_arguments(group) -> None:
    # --dir (checkpoint's flag, read here too): where the generated checkpoint and the imports go (twice --size-gb)
    group.add_argument("--size-gb", type=positive, default=6.0, help="size of the generated checkpoint in GB (also "
                       "reads --dir, which needs about twice that free)")


BENCHMARKS.register("import", Benchmark(
    help="peak RSS of edge-jax hf import on a generated --size-gb checkpoint (streaming: it should stay far "
         "below the checkpoint's size; also takes --repeats)", run="edge_jax.bench.hf_import:run",
    add_arguments=_import_arguments, defaults={"repeats": 1}))


def _kernels_arguments(group) -> None:
    group.add_argument("--kernel", action="append", default=None,
                       help="only this kernel (repeatable); default: every registered one")
    group.add_argument("--small", action="store_true", help="small shapes even where the kernels compile")
    group.add_argument("--calls", type=count, default=KERNEL_CALLS, help="queued calls per timed sample (default "
                       f"{KERNEL_CALLS}): one call of a kernel under a millisecond times mostly dispatch and sync")


BENCHMARKS.register("kernels", Benchmark(
    help="each Pallas kernel against its XLA reference at the papers' shapes (on CPU: small, interpreted, "
         "checked only)", run="edge_jax.bench.kernels:run", add_arguments=_kernels_arguments,
    defaults={"repeats": 20}, writes_json=True))


def _train_step_arguments(group) -> None:
    group.add_argument("--config", default="configs/lm.py:size=tiny", help="path/to/config.py[:arg] "
                       "(--config.* overrides apply)")
    group.add_argument("--steps", type=count, default=20, help="steps per timed round")


BENCHMARKS.register("train-step", Benchmark(
    help="our jitted train step against a minimal hand-written JAX step (ratio = minimal time / ours); "
         "also takes --repeats", run="edge_jax.bench.train_step:run", add_arguments=_train_step_arguments))


TRAIN_LOOP_CASES = ("compute", "dispatch")  # train-loop: its cases (--case)


def _train_loop_arguments(group) -> None:
    # --config and --steps (training steps a round) are train-step's flags, read here too
    group.add_argument("--log-every", type=count, default=5, help="train.log_every of the loop")
    group.add_argument("--case", default="both", choices=(*TRAIN_LOOP_CASES, "both"), help="which case to time")


BENCHMARKS.register("train-loop", Benchmark(
    help="the whole training loop (input, logging, checkpoint and eval checks, preemption watch) against the same "
         "compiled step dispatched back to back over the same batches, for the --config model (compute-bound) and "
         "a step of about a millisecond (dispatch-bound); ratio = minimal / loop, goal >= 0.95 (also reads --config, "
         "--steps: the compute case's steps a round, the dispatch case runs ten times as many; --repeats)",
    run="edge_jax.bench.train_loop:run", add_arguments=_train_loop_arguments,
    defaults={"repeats": 3}))
