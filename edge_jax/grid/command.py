"""`edge-jax grid`: run an ablation grid, then write its table and plot.

    edge-jax grid ablations/NAME.py --preset tiny --seeds 3
    edge-jax grid ablations/NAME.py --list            # K, cell, seed, status
    edge-jax grid ablations/NAME.py --cell 3          # one unit (job arrays)
    edge-jax grid ablations/NAME.py --tables-only     # rebuild from records
    edge-jax grid ablations/NAME.py --set train.steps=50

Mount with `command.add_arguments(subparser)` and dispatch to `command.run(args)`.
Every argument is checked before anything is written or trained (the ablation file and its preset, each
cell's config with the --set overrides, --out, --cell): a bad one raises a one-line
:class:`edge_jax.errors.UserError`, which the CLI prints with exit status 2.
Exit status: 0 all done (units that another process holds count as done: it writes their records),
1 some cell failed, 2 bad arguments or ablation file.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

from edge_jax import distributed
from edge_jax.errors import ConfigError, UserError, one_line
from edge_jax.grid import drift, plots, post, runner, spec, tables
from edge_jax.grid.records import read_record
from edge_jax.utils import storage
from edge_jax.utils.args import at_least, count, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ablation", help="ablation file, e.g. ablations/NAME.py")
    parser.add_argument("--preset", default="tiny", help="grid preset (default: tiny)")
    parser.add_argument("--seeds", type=count, default=3, metavar="N",
                        help="run seeds 0..N-1 (default: 3, the fewest the paired test in the tables can use)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="output dir (default: results/<name>; "
                             "results/<name>-<preset> for presets other than tiny)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="extra config override for every cell (repeatable)")
    parser.add_argument("--no-reuse", action="store_true",
                        help="train every cell even if a sibling grid holds a run with the same config")
    parser.add_argument("--no-post", action="store_true",
                        help="do not run the grid's post hook (its figures and measurements stay as they are: "
                             "e.g. rebuilding tables on a busy machine whose post hook times decoding)")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="write records from a working tree with uncommitted changes (they keep the sha256 "
                             "of `git diff HEAD` and the table is marked); refused by default")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true",
                      help="print the cell x seed units with their index K and exit")
    mode.add_argument("--cell", type=at_least(0), default=None, metavar="K",
                      help="run only unit K of --list (for job arrays)")
    mode.add_argument("--tables-only", action="store_true",
                      help="only rebuild table.md, table.csv, curves.png and the post hook's outputs from records "
                           "(a post hook whose inputs are not here keeps its outputs as they are)")
    mode.add_argument("--compile-only", action="store_true",
                      help="train nothing: compile every training run for --topology and write "
                           "results/<name>/<preset>_compile.md, or gpu_compile.md for a GPU (docs/compile.md)")
    parser.add_argument("--topology", default=None, help="with --compile-only: a TPU type (v5p-128, v5e-256 ...), "
                        "an NVIDIA card (h100, h200, a100, 8xh100), cpu:N or local")
    parser.add_argument("--slices", type=count, default=1, help="with --compile-only: TPU slices over DCN")
    parser.add_argument("--mesh", default=None, help="with --compile-only: AXIS=SIZE over data, fsdp, tensor "
                        "(default: data = slices, fsdp = the other devices)")
    parser.add_argument("--unrolled", action="store_true", help="with --compile-only: one compiled body per layer "
                        "instead of the default scanned layers (model.scan_layers=True)")


def joins_job(args: argparse.Namespace) -> bool:
    """Whether this grid command trains (and so joins a multi-process job): not --list, --tables-only
    or --compile-only."""
    return not (args.list or args.tables_only or args.compile_only)


def default_out(grid: spec.Grid) -> Path:
    name = grid.name if grid.preset == "tiny" else f"{grid.name}-{grid.preset}"
    return Path("results") / name


def parse_assignment(text: str) -> tuple[str, Any]:
    """"train.steps=200" -> ("train.steps", 200). Values are Python literals
    (numbers, quoted strings, lists, True/False/None; also true/false/none);
    anything else is kept as a string, so `train.schedule=wsd` works unquoted."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects KEY=VALUE, got {text!r}; e.g. --set train.steps=200")
    value = value.strip()
    lowered = {"true": True, "false": False, "none": None, "null": None}
    if value.lower() in lowered:
        return key, lowered[value.lower()]
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def run(args: argparse.Namespace, *, train_fn: runner.TrainFn | None = None,
        load_config: runner.LoadConfigFn | None = None, log=print) -> int:
    grid = spec.load_grid(args.ablation, args.preset)
    units = runner.plan(grid, args.seeds)
    extra = dict(parse_assignment(a) for a in args.overrides)
    if "seed" in extra:
        raise ConfigError("--set seed=... is not allowed; use --seeds")
    if not args.compile_only and (args.topology or args.mesh or args.slices != 1):
        raise UserError("--topology, --slices and --mesh apply only with --compile-only; add it or drop them")
    if not args.compile_only and args.unrolled:
        raise UserError("--unrolled applies only with --compile-only; add it or drop it")
    load_config = load_config or runner.default_load_config
    if args.compile_only:
        return _compile_only(grid, args, extra, load_config, log)
    out = storage.path(args.out) if args.out else default_out(grid)
    if args.list:
        for u in units:
            path = runner.record_path(out, u)
            status = "missing" if not path.exists() else "recorded" if read_record(path)[0] else "unreadable"
            log(f"{u.index}\t{u.cell}\t{u.seed}\t{status}")
        return 0
    if args.cell is not None:
        if args.cell >= len(units):
            raise UserError(f"--cell {args.cell} out of range; valid: 0..{len(units) - 1} "
                            f"({len(grid.cells)} cells x {args.seeds} seeds; see --list)")
        units = [units[args.cell]]
    _check_out(out)

    failed = 0
    if not args.tables_only:
        check_overrides(grid, units, extra, load_config)
        summary = runner.run_grid(grid, out, units, extra_overrides=extra, train_fn=train_fn,
                                  load_config=load_config, log=log, reuse=not args.no_reuse,
                                  allow_dirty=args.allow_dirty)
        failed = len(summary.failed)
        log(f"{grid.name}: {len(summary.ran)} ran, {len(summary.reused)} reused, {len(summary.skipped)} skipped, "
            f"{len(summary.held)} held by other processes, {failed} failed")

    distributed.on_lead("tables", lambda: _write_tables(grid, args, out, log, load_config, extra))
    if failed:
        log(f"error: {failed} cell(s) failed: "
            + ", ".join(u.label for u, _ in summary.failed))
        return 1
    return 0


def check_overrides(grid: spec.Grid, units: list[runner.Unit], extra: dict, load_config: runner.LoadConfigFn) -> None:
    """Load the config of every cell that ``units`` run, with the --set overrides ``extra``, before anything
    runs: a bad key or value is one line naming --set, or the ablation file's cell when it fails alike
    without them."""
    seeds: dict[str, int] = {}
    for u in units:
        seeds.setdefault(u.cell, u.seed)
    for cell, seed in seeds.items():
        problem = _config_problem(load_config, grid.base, grid.overrides(cell, seed, extra))
        if problem is None:
            continue
        where = f"cell {cell!r} of {grid.path}, preset {grid.preset!r}"
        if extra and _config_problem(load_config, grid.base, grid.overrides(cell, seed)) != problem:
            raise ConfigError(f"--set: {problem} (in {where})")
        raise ConfigError(f"{where}: {problem}; fix the ablation file")


def _config_problem(load_config: runner.LoadConfigFn, base: str, overrides: dict) -> str | None:
    """Why ``base`` with ``overrides`` does not load (one line), or None."""
    try:
        load_config(base, overrides)
    except (UserError, ValueError) as e:
        return one_line(e)
    return None


def _check_out(out: Path) -> None:
    """--out as a directory this job can write (process 0 answers: it writes the files), before anything is."""
    distributed.on_lead("grid --out", lambda: str(output_dir(out, "--out")))


def _write_tables(grid, args, out: Path, log, load_config: runner.LoadConfigFn, extra: dict) -> None:
    """Tables, curves and the grid's post hook from every record in ``out`` (process 0 of a job); records
    made with other settings than this command's (``extra``: its --set overrides) are named in the table."""
    records = runner.load_records(out, log=log)
    changed = drift.changed_line(*drift.changed_settings(grid, records, load_config, extra))
    table = tables.write_tables(grid, records, out, args.seeds, changed)
    curves = tables.has_curves(table.records)
    if curves:
        plots.write_curves(grid, records, out)
    if grid.post and records and getattr(args, "no_post", False):
        log(f"{grid.post}: not run (--no-post)")
    elif grid.post and records and args.cell is not None:
        log(f"{grid.post}: skipped with --cell (it reads every cell); run --tables-only when the grid is done")
    elif grid.post and records:
        post.run_post(grid, records, out, log)   # a hook that cannot run here keeps its outputs, in one line
    missing = sum(len(r.missing_seeds) for r in table.rows)
    log(f"wrote {out / 'table.md'}, {out / 'table.csv'}{', ' + str(out / 'curves.png') if curves else ''} "
        f"from {len(table.records)} record(s)" + (f"; {missing} missing" if missing else ""))


def _compile_only(grid, args, extra, load_config, log) -> int:
    from edge_jax.compile.chips import make_target
    from edge_jax.compile.command import parse_mesh
    from edge_jax.grid.compile_table import compile_grid
    if not args.topology:
        raise UserError("--compile-only needs --topology (e.g. v5p-128, v5e-256, cpu:8)")
    out = storage.path(args.out) if args.out else Path("results") / grid.name
    _check_out(out)
    check_overrides(grid, runner.plan(grid, 1), extra, load_config)
    target = make_target(args.topology, args.slices)
    path = compile_grid(grid, target, parse_mesh(args.mesh, args.slices), out, load_config, extra, log,
                        unrolled=args.unrolled)
    log(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from edge_jax.compile.chips import prepare_for_argv
    program, argv = argv is None, sys.argv[1:] if argv is None else argv
    prepare_for_argv(argv, program)
    parser = argparse.ArgumentParser(prog="edge-jax grid", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except UserError as e:
        print(f"edge-jax grid: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
