"""``edge-jax`` command line: train | eval | grid | bench | params | moe | cache | analyze.

Config options follow big_vision: ``--config configs/lm.py:size=tiny --config.train.steps=200``.
Errors a user can fix are printed as one line (``edge-jax: error: ...``) with exit status 2.
"""
from __future__ import annotations

import argparse
import sys

from edge_jax.config import ConfigError


def _split_config_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    rest, overrides = [], []
    it = iter(argv)
    for a in it:
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


def _cmd_train(args, overrides) -> int:
    from edge_jax.config import load_config
    from edge_jax.train.loop import train_and_evaluate
    config = load_config(args.config, overrides)
    _print_result(train_and_evaluate(config, args.workdir))
    return 0


def _cmd_eval(args, overrides) -> int:
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


def _cmd_analyze_logit_lens(args, overrides) -> int:
    from edge_jax.papers.meki.logit_lens import run_logit_lens
    if args.label and len(args.label) != len(args.workdir):
        raise ConfigError(f"{len(args.label)} --label for {len(args.workdir)} --workdir; give one per workdir or none")
    if len(set(args.label)) != len(args.label):
        raise ConfigError(f"--label values must be distinct, got {args.label}")
    if args.tokens <= 0:
        raise ConfigError(f"--tokens={args.tokens} must be positive")
    out = run_logit_lens(args.workdir, args.out, args.label or None, args.tokens)
    for label, r in zip(out["labels"], out["results"]):
        print(f"{label}: step={r['step']} tokens={r['tokens']} kl=" + ",".join(f"{v:.4g}" for v in r["kl"]))
    print(f"wrote {out['paths']['md']}, {out['paths']['csv']}, {out['paths']['png']}")
    return 0


def _cmd_analyze_sparsity(args, overrides) -> int:
    from edge_jax.papers.plm.sparsity import check_ratios
    from edge_jax.papers.plm.sparsity_report import run_sparsity
    try:
        ratios = check_ratios(args.ratios.split(",")) if args.ratios else None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if args.batches <= 0 or args.max_ppl_increase < 0:
        raise ConfigError(f"--batches must be positive and --max-ppl-increase >= 0, got {args.batches}, "
                          f"{args.max_ppl_increase}")
    out = run_sparsity(args.workdir, args.out, args.label or None, args.batches, ratios, args.max_ppl_increase)
    for label, r in zip(out["labels"], out["results"]):
        print(f"{label}: step={r['step']} ffn={r['ffn']} base_ppl={r['base_ppl']:.4f} "
              f"sparsity_rate={r['sparsity_rate']:.4f} zero_fraction={r['zero_fraction']:.4f} "
              f"executed_fraction={r['executed_fraction']:.4f}")
    print("wrote " + ", ".join(str(p) for p in out["paths"]))
    return 0


def _cmd_analyze_kv_cache(args, overrides) -> int:
    from edge_jax.papers.plm.kv_cache import kv_cache_report
    from edge_jax.config import load_config
    if args.tokens < 0 or args.bits < 0 or args.batch <= 0:
        raise ConfigError(f"--tokens and --bits must be >= 0 and --batch positive, got {args.tokens}, "
                          f"{args.bits}, {args.batch}")
    print(kv_cache_report(load_config(args.config, overrides), args.tokens, args.bits, args.batch, args.config))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-jax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a model (resumes from --workdir)")
    p.add_argument("--config", required=True, help="path/to/config.py[:arg]")
    p.add_argument("--workdir", required=True)
    p.set_defaults(fn=_cmd_train)
    p = sub.add_parser("eval", help="validation loss/perplexity of a trained workdir")
    p.add_argument("--workdir", required=True)
    p.add_argument("--batches", type=int, default=0, help="0 = the whole split")
    p.add_argument("--split", default="validation")
    p.add_argument("--qa", action="store_true", help="also score exact match on the question split (facts, longctx)")
    p.add_argument("--max-questions", type=int, default=0, help="0 = all questions")
    p.set_defaults(fn=_cmd_eval)
    p = sub.add_parser("params", help="parameter counts (built abstractly, no memory used)")
    p.add_argument("--config", required=True)
    p.set_defaults(fn=_cmd_params)
    from edge_jax.grid import command as grid_command
    p = sub.add_parser("grid", help="run an ablation grid and write its tables")
    grid_command.add_arguments(p)
    p.set_defaults(fn=lambda a, o: grid_command.run(a))
    from edge_jax.bench import command as bench_command
    p = sub.add_parser("bench", help="benchmarks that print ratios measured in one run")
    bench_command.add_arguments(p)
    p.set_defaults(fn=lambda a, o: bench_command.run(a, o))
    from edge_jax.papers.npumoe import command as moe_command
    moe_command.add_arguments(sub)
    from edge_jax.papers.expert_cache import command as cache_command
    cache_command.add_arguments(sub)
    p = sub.add_parser("analyze", help="analyses of trained workdirs")
    analyses = p.add_subparsers(dest="analysis", required=True)
    p = analyses.add_parser("logit-lens", help="per-layer KL of early-exit predictions vs the final output")
    p.add_argument("--workdir", action="append", required=True, help="trained workdir (repeatable)")
    p.add_argument("--label", action="append", default=[], help="one per --workdir (default: base names)")
    p.add_argument("--tokens", type=int, default=10_000, help="validation tokens to average over")
    p.add_argument("--out", required=True, help="writes logit_lens.md, .csv and .png here")
    p.set_defaults(fn=_cmd_analyze_logit_lens)
    p = analyses.add_parser("kv-cache", help="KV-cache bytes per token, PLM eqs. (6)-(7) vs the decoder's "
                            "cache arrays, for a model and its MHA twin (no workdir; --config.* overrides apply)")
    p.add_argument("--config", required=True, help="path/to/config.py[:arg], e.g. configs/plm.py:size=1p8b")
    p.add_argument("--tokens", type=int, default=0, help="tokens to size the measured cache for (0: data.seq_len)")
    p.add_argument("--bits", type=int, default=0, help="bit width in the formulas (0: the model dtype's, "
                   "32 for float32, 16 for bfloat16); the arrays keep the model dtype")
    p.add_argument("--batch", type=int, default=1, help="sequences in the measured cache")
    p.set_defaults(fn=_cmd_analyze_kv_cache)
    p = analyses.add_parser("sparsity", help="PLM Algorithm 1: perplexity vs masked FFN activations (Fig. 11)")
    p.add_argument("--workdir", action="append", required=True, help="trained workdir (repeatable)")
    p.add_argument("--label", action="append", default=[], help="one per --workdir (default: base names)")
    p.add_argument("--batches", type=int, default=4, help="validation batches to measure perplexity on")
    p.add_argument("--ratios", default="", help="masked fractions in [0, 1], comma-separated "
                   "(default: 0, 0.05, ..., 1)")
    p.add_argument("--max-ppl-increase", type=float, default=1.0, help="Δppl of Algorithm 1 (paper: 1)")
    p.add_argument("--out", required=True, help="writes sparsity.md, .csv and .png here")
    p.set_defaults(fn=_cmd_analyze_sparsity)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        rest, overrides = _split_config_overrides(argv)
        args = parser.parse_args(rest)
        takes_overrides = args.command in ("train", "params", "bench", "moe", "cache") or getattr(args, "analysis", "") == "kv-cache"
        if overrides and not takes_overrides:
            raise ConfigError(f"--config.* overrides do not apply to `{args.command}`"
                              + ("; use --set KEY=VALUE" if args.command == "grid" else ""))
        return args.fn(args, overrides) or 0
    except (ConfigError, FileNotFoundError) as e:
        print(f"edge-jax: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # errors that carry their own one-line fix
        from edge_jax.data import DataError
        from edge_jax.papers.npumoe.calibrate import CalibrationError
        from edge_jax.papers.npumoe.traces import TraceError
        from edge_jax.train.loop import TrainingError
        if isinstance(e, (DataError, TrainingError, CalibrationError, TraceError)):
            print(f"edge-jax: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
