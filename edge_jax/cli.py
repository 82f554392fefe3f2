"""``edge-jax``: train | eval | params | grid | bench | compile | data | hf | summary | docs | launch | moe | cache |
analyze.

Config options follow big_vision: ``--config configs/lm.py:size=tiny --config.train.steps=200``.
Errors a user can fix (:class:`edge_jax.errors.UserError`) are printed as one line
(``edge-jax: error: ...``) with exit status 2, and so are argparse's refusals (:class:`Parser`); each
command checks its arguments (:mod:`edge_jax.utils.args`) before it starts work. A run stopped by
SIGTERM after saving a checkpoint (:class:`edge_jax.errors.Preempted`) prints one line and exits 75; a
first Ctrl-C does the same and exits 130 (:class:`edge_jax.errors.Interrupted`), a second stops at once.
The core subcommands are defined here; each paper adds its own through
:data:`edge_jax.registry.COMMANDS` (see :func:`build_parser`). Every command that runs models may be
one process of a multi-process job: it takes ``--coordinator-address``, ``--num-processes`` and
``--process-id`` and joins the job before anything starts JAX (:func:`edge_jax.distributed.start`;
docs/multihost.md).

Building the parser imports no JAX: it reads what :func:`edge_jax.plugins.load_cli` declared, so
``--help`` and argument errors answer at once. Once the arguments parse, :func:`main` fills every
registry (:func:`edge_jax.plugins.load`) unless the command set ``needs_plugins=False`` (``launch``,
``summary``), then runs it.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Callable

from edge_jax import distributed, plugins
from edge_jax.compile.chips import prepare_for_argv
from edge_jax.errors import EXIT_INTERRUPTED, EXIT_PREEMPTED, ConfigError, Interrupted, Preempted, UserError
from edge_jax.utils.args import UsageError, at_least, count, output_dir, positive, trained_workdir

# Core groups that registered commands join as "GROUP NAME": group -> (help, dest of the choice).
GROUPS = {"analyze": ("analyses of trained workdirs", "analysis")}


def _split_config_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    rest, overrides = [], []
    it = iter(argv)
    for a in it:
        if a == "--":  # what follows belongs to another command (edge-jax launch ... -- COMMAND)
            return rest + [a, *it], overrides
        if a.startswith("--config."):
            key, eq, val = a[len("--config."):].partition("=")
            if not eq:
                val = next(it, None)
                if val is None:
                    raise ConfigError(f"--config.{key} needs a value, e.g. --config.{key}=VALUE")
            overrides.append(f"{key}={val}")
        else:
            rest.append(a)
    return rest, overrides


def _print_result(result: dict) -> None:
    print(" ".join(f"{k}={v:.5g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()))


class Parser(argparse.ArgumentParser):
    """argparse, with what it refuses raised as one line (:class:`UsageError`) instead of the usage
    text and an exit; its subcommands' parsers are of this class too."""

    def error(self, message: str):
        raise UsageError(f"{message} (`{self.prog} --help` lists the arguments)")


def _cmd_train(args, overrides) -> int:
    from edge_jax.config import load_config
    from edge_jax.train.loop import train_and_evaluate
    output_dir(args.workdir, "--workdir")
    config = load_config(args.config, overrides)
    _print_result(train_and_evaluate(config, args.workdir))
    return 0


def _cmd_eval(args, overrides) -> int:
    trained_workdir(args.workdir)
    if args.tasks:
        from edge_jax.eval.command import zero_shot_workdir
        _print_result(zero_shot_workdir(args))
        return 0
    from edge_jax.train.evaluate import evaluate_workdir
    result = evaluate_workdir(args.workdir, num_batches=args.batches, split=args.split, qa=args.qa,
                              max_questions=args.max_questions)
    _print_result(result)
    return 0


def _cmd_params(args, overrides) -> int:
    from edge_jax.config import load_config
    from edge_jax.models.count import report_params
    from edge_jax.train.setup import resolve_config
    print(report_params(resolve_config(load_config(args.config, overrides))[0]))
    return 0


def _add_core_commands(sub) -> None:
    p = sub.add_parser("train", help="train a model (resumes from --workdir)")
    p.add_argument("--config", required=True, help="path/to/config.py[:arg]")
    p.add_argument("--workdir", required=True)
    p.set_defaults(fn=_cmd_train, takes_overrides=True)
    p = sub.add_parser("eval", help="validation loss/perplexity of a trained workdir, or zero-shot tasks (--tasks)")
    p.add_argument("--workdir", required=True)
    p.add_argument("--batches", type=at_least(0), default=0, help="0 = the whole split")
    p.add_argument("--split", default="validation")
    p.add_argument("--qa", action="store_true", help="also score exact match on the question split (facts, longctx)")
    p.add_argument("--max-questions", type=at_least(0), default=0, help="0 = all questions")
    from edge_jax.eval import command as eval_command
    eval_command.add_arguments(p)
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("params", help="parameter counts (built abstractly, no memory used)")
    p.add_argument("--config", required=True)
    p.set_defaults(fn=_cmd_params, takes_overrides=True, joins_job=False)
    from edge_jax.grid import command as grid_command
    p = sub.add_parser("grid", help="run an ablation grid and write its tables")
    grid_command.add_arguments(p)
    p.set_defaults(fn=lambda a, o: grid_command.run(a), overrides_hint="; use --set KEY=VALUE",
                   joins_job=grid_command.joins_job)
    from edge_jax.bench import command as bench_command
    p = sub.add_parser("bench", help="benchmarks that print ratios measured in one run")
    bench_command.add_arguments(p)
    p.set_defaults(fn=bench_command.run, takes_overrides=True)
    from edge_jax.data import command as data_command
    p = sub.add_parser("data", help="prepare a dataset's token shards once (edge-jax data prepare)")
    data_command.add_arguments(p)
    from edge_jax.hf import command as hf_command
    p = sub.add_parser("hf", help="HF checkpoints in and out: edge-jax hf import SRC --workdir W | hf export "
                                  "--workdir W --out DIR (docs/interop.md)")
    hf_command.add_arguments(p)
    from edge_jax.grid import summary
    p = sub.add_parser("summary", help="one row per ablation grid: the paper's pairs that agree, disagree or "
                                       "are within noise")
    summary.add_arguments(p)
    p.set_defaults(fn=lambda a, o: summary.run(a), joins_job=False, needs_plugins=False)
    from edge_jax.docgen import command as docs_command
    p = sub.add_parser("docs", help="rewrite the generated blocks of README.md and docs/*.md from the records "
                                    "(--check: name the blocks that differ, exit 1)")
    docs_command.add_arguments(p)
    p.set_defaults(fn=lambda a, o: docs_command.run(a), joins_job=False)
    from edge_jax.utils import launch
    p = sub.add_parser("launch", help="run a command as N processes of one job on this machine (docs/multihost.md)")
    launch.add_arguments(p)
    p.set_defaults(fn=lambda a, o: launch.launch(a.processes, a.devices_per_process, a.argv), joins_job=False,
                   needs_plugins=False)
    from edge_jax.compile import command as compile_command
    p = sub.add_parser("compile", help="compile the train/decode step for a TPU topology or GPU (or cpu:N, local) and "
                       "print memory per device, fit and a roofline estimate")
    compile_command.add_arguments(p)
    p.set_defaults(fn=compile_command.run, takes_overrides=True)


def build_parser() -> argparse.ArgumentParser:
    """The core subcommands, then those in :data:`edge_jax.registry.COMMANDS` in registration order
    (declared by :func:`edge_jax.plugins.load_cli`, called here; no JAX is imported).

    A registered command is ``add_parser(subparsers)``: it adds its parser (named as registered) and
    sets ``fn(args, overrides) -> exit status``, and ``takes_overrides=True`` where ``--config.*``
    overrides apply; ``fn`` imports its work when it runs. A name ``"GROUP NAME"`` adds ``NAME`` under
    the core group ``GROUP`` (:data:`GROUPS`), e.g. ``"analyze logit-lens"``."""
    from edge_jax.registry import COMMANDS
    plugins.load_cli()
    parser = Parser(prog="edge-jax", description=__doc__.split("\n\n")[0].replace("\n", " "))
    sub = parser.add_subparsers(dest="command", required=True)
    _add_core_commands(sub)
    grouped: dict[str, list[tuple[str, Callable]]] = {}
    for name, add_parser in COMMANDS.items():
        group, _, leaf = name.rpartition(" ")
        if group:
            if group not in GROUPS:
                raise ValueError(f"command {name!r}: no group {group!r}; groups: {', '.join(GROUPS)}")
            grouped.setdefault(group, []).append((leaf, add_parser))
        else:
            _add(sub, name, add_parser)
    for group, commands in grouped.items():
        help_, dest = GROUPS[group]
        inner = sub.add_parser(group, help=help_).add_subparsers(dest=dest, required=True)
        for leaf, add_parser in commands:
            _add(inner, leaf, add_parser)
    _add_job_flags(parser)
    return parser


def _add_job_flags(parser: argparse.ArgumentParser) -> None:
    """The multi-process flags on every leaf command but those that never join a job."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    if subs:
        for child in subs[0].choices.values():
            _add_job_flags(child)
    elif parser.get_default("joins_job") is not False:
        g = parser.add_argument_group("multi-process job", "one process of a job of several (default: from the "
                                      "environment, docs/multihost.md)")
        g.add_argument(distributed.FLAGS[distributed.COORDINATOR], default=None, metavar="HOST:PORT",
                       help=f"the job's coordinator, process 0's address (${distributed.COORDINATOR})")
        g.add_argument(distributed.FLAGS[distributed.NUM_PROCESSES], type=count, default=None, metavar="N",
                       help=f"processes in the job (${distributed.NUM_PROCESSES})")
        g.add_argument(distributed.FLAGS[distributed.PROCESS_ID], type=at_least(0), default=None, metavar="I",
                       help=f"this process's id, 0..N-1 (${distributed.PROCESS_ID})")
        g.add_argument(distributed.JOIN_FLAG, type=positive, default=None, metavar="SECONDS",
                       help="how long the processes wait for each other at the start before one line names the "
                            f"missing ones (${distributed.JOIN_ENV}; default {distributed.JOIN_S:g})")


def _joins(args) -> bool:
    joins = getattr(args, "joins_job", True)
    return not (joins is False or (callable(joins) and not joins(args)))


def check_job(args) -> None:
    """Refuse bad job settings (a coordinator address without a port, an id out of range, ...) in one line,
    before the plugins load or anything starts (:func:`edge_jax.distributed.decide`)."""
    if _joins(args):
        distributed.decide(args.coordinator_address, args.num_processes, args.process_id)
        distributed.join_timeout(args.join_timeout)


def join_job(args) -> None:
    """Start this process's part of the job (:func:`edge_jax.distributed.start`) for a command that runs models."""
    if _joins(args):
        distributed.start(args.coordinator_address, args.num_processes, args.process_id, args.join_timeout,
                          workdir=getattr(args, "workdir", None))


def _add(sub, name: str, add_parser: Callable) -> None:
    add_parser(sub)
    if name not in sub.choices:
        raise ValueError(f"command {name!r} added no parser of that name; name its parser as registered")


def main(argv: list[str] | None = None) -> int:
    program, argv = argv is None, sys.argv[1:] if argv is None else argv
    prepare_for_argv(argv, program)  # before anything imports JAX (the plugins, once the arguments parse)
    distributed.quiet_platforms()
    parser = build_parser()
    try:
        rest, overrides = _split_config_overrides(argv)
        args = parser.parse_args(rest)
        if overrides and not getattr(args, "takes_overrides", False):
            raise ConfigError(f"--config.* overrides do not apply to `{args.command}`"
                              + getattr(args, "overrides_hint", ""))
        check_job(args)
        if getattr(args, "needs_plugins", True):
            plugins.load()
        join_job(args)
        status = args.fn(args, overrides) or 0
    except (UserError, FileNotFoundError) as e:  # errors that carry their own one-line fix
        print(f"edge-jax: error: {e}", file=sys.stderr)
        distributed.leave(2)
        return 2
    except Preempted as e:  # SIGTERM or a first Ctrl-C: a checkpoint was saved, the same command resumes
        interrupted = isinstance(e, Interrupted)
        print(f"edge-jax: {'interrupted' if interrupted else 'preempted'}: {e}", file=sys.stderr)
        status = EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED
        distributed.leave(status)
        return status
    except KeyboardInterrupt:  # Ctrl-C outside training, or a second one: stopped at once
        print("\nedge-jax: interrupted: stopped at once; what was saved before is kept (rerun the same command to "
              "resume a training run from its last checkpoint)", file=sys.stderr)
        distributed.leave(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except BaseException:
        if distributed.process_count() > 1:  # the traceback, then out at once (distributed.leave)
            traceback.print_exc()
            distributed.leave(1)
        raise
    if status:
        distributed.leave(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
