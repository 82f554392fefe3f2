"""MeKi on the command line: ``edge-jax analyze logit-lens``, per-layer KL of early-exit predictions vs the
final output, and ``edge-jax bench meki-decode`` (its flags; what it measures is :mod:`edge_jax.papers.meki.bench`).
Imports no JAX (:func:`edge_jax.plugins.load_cli`): the command imports its work when it runs.

    edge-jax analyze logit-lens --workdir W_base W_meki --label base --label meki --out DIR
    edge-jax analyze logit-lens --workdir results/meki_main/runs/{baseline,meki}/seed{0,1,2} \\
        --compare meki:baseline --out DIR
    edge-jax analyze logit-lens --runs results/meki_main --seeds 3 \\
        --compare meki:baseline --compare meki_plus:baseline_plus --out DIR
"""
from __future__ import annotations

from edge_jax.bench import Benchmark
from edge_jax.errors import ConfigError
from edge_jax.registry import BENCHMARKS, COMMANDS
from edge_jax.utils.args import count, input_dir, output_dir, trained_workdir


@COMMANDS.register("analyze logit-lens")
def add_parser(analyses):
    """The ``logit-lens`` analysis under ``edge-jax analyze``."""
    p = analyses.add_parser("logit-lens", help="per-layer KL of early-exit predictions vs the final output, "
                                               "over seeds, with paired tests of the paper's claims")
    runs = p.add_mutually_exclusive_group(required=True)
    runs.add_argument("--workdir", action="extend", nargs="+", metavar="W",
                      help="trained workdirs (repeatable, several per flag); a grid's OUT/runs/<cell>/seed<s> is "
                           "cell <cell>, seed <s>; any other is its own cell (its base name, its config's seed)")
    runs.add_argument("--runs", metavar="DIR",
                      help="a grid's output directory: every OUT/runs/<cell>/seed<s> in it (see --cells, --seeds)")
    p.add_argument("--label", action="append", default=[],
                   help="with --workdir: the cell of each workdir, one per workdir (repeat a label for a cell's seeds)")
    p.add_argument("--cells", metavar="A,B,...", help="with --runs: these cells only (default: all)")
    p.add_argument("--seeds", type=count, metavar="N", help="with --runs: seeds 0..N-1 (default: every seed found)")
    p.add_argument("--compare", action="append", default=[], metavar="BETTER:WORSE",
                   help="test the paper's claim that BETTER has the lower KL at every layer (paired t-test per "
                        "layer over the seeds both cells have; repeatable)")
    p.add_argument("--tokens", type=count, default=10_000, help="validation tokens to average over")
    p.add_argument("--out", required=True,
                   help="writes logit_lens.md, .csv, .png here (and logit_lens_pairs.csv with --compare)")
    p.set_defaults(fn=_logit_lens)
    return p


def _logit_lens(args, overrides) -> int:
    from edge_jax.papers.meki.logit_lens import run_logit_lens
    from edge_jax.papers.meki.logit_lens_seeds import check_compare, find_runs, group_workdirs, headline, parse_compare
    if args.runs is None and (args.cells or args.seeds):
        raise ConfigError("--cells and --seeds select runs under --runs; with --workdir name the runs themselves")
    if args.runs is not None and args.label:
        raise ConfigError("--label applies to --workdir; under --runs each run's cell is its directory name")
    pairs = [parse_compare(c) for c in args.compare]
    output_dir(args.out, "--out")
    if args.runs is not None:
        input_dir(args.runs, "--runs", fix="give the output directory of an `edge-jax grid` run")
        cells = [c for c in args.cells.split(",") if c] if args.cells else None
        runs = find_runs(args.runs, cells, args.seeds)
    else:
        for workdir in args.workdir:
            trained_workdir(workdir)
        runs = group_workdirs(args.workdir, args.label or None)
    check_compare(pairs, list(dict.fromkeys(r.cell for r in runs)))
    out = run_logit_lens(runs, args.out, pairs, args.tokens)
    for run, r in zip(out["runs"], out["results"]):
        print(f"{run.cell} seed {run.seed}: step={r['step']} tokens={r['tokens']} kl="
              + ",".join(f"{v:.4g}" for v in r["kl"]) + " kl_reverse=" + ",".join(f"{v:.4g}" for v in r["kl_reverse"]))
    for comparison in out["comparisons"]:
        print(headline(comparison))
    if out["paths"]:
        print("wrote " + ", ".join(out["paths"].values()))
    return 0


# --- `edge-jax bench meki-decode` (edge_jax.bench.command is the harness)


def _bench_arguments(group) -> None:
    group.add_argument("--d-mem", type=count, default=None, help="MeKi memory width (default 64; with --preset, "
                       "MeKi Table 5: 128 / 256 / 512 for 0.6B / 1.7B / 4B)")
    group.add_argument("--prompt", type=count, default=64, help="prompt tokens (prefilled, not timed)")
    group.add_argument("--new-tokens", type=count, default=128, help="decode steps per timed round")


BENCHMARKS.register("meki-decode", Benchmark(
    help="MeKi Table 1: decode speed of dense, folded MeKi and training-form MeKi. Also takes --preset, "
         "--d-model, --layers, --heads, --kv-heads, --head-dim, --d-ff, --vocab, --batch, --dtype, --repeats; "
         "default shape: d_model 512, 8 layers, 8/4 heads x 64, d_ff 1536, vocab 32000, d_mem 64",
    run="edge_jax.papers.meki.bench:run", add_arguments=_bench_arguments, writes_json=True))
