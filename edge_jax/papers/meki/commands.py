"""``edge-jax analyze logit-lens``: per-layer KL of early-exit predictions vs the final output."""
from __future__ import annotations

from edge_jax.errors import ConfigError
from edge_jax.registry import COMMANDS
from edge_jax.utils.args import count, output_dir, trained_workdir
from edge_jax.utils.workdirs import add_workdir_arguments


@COMMANDS.register("analyze logit-lens")
def add_parser(analyses):
    """The ``logit-lens`` analysis under ``edge-jax analyze``."""
    p = analyses.add_parser("logit-lens", help="per-layer KL of early-exit predictions vs the final output")
    add_workdir_arguments(p)
    p.add_argument("--tokens", type=count, default=10_000, help="validation tokens to average over")
    p.add_argument("--out", required=True, help="writes logit_lens.md, .csv and .png here")
    p.set_defaults(fn=_logit_lens)
    return p


def _logit_lens(args, overrides) -> int:
    from edge_jax.papers.meki.logit_lens import run_logit_lens
    if args.label and len(args.label) != len(args.workdir):
        raise ConfigError(f"{len(args.label)} --label for {len(args.workdir)} --workdir; give one per workdir or none")
    if len(set(args.label)) != len(args.label):
        raise ConfigError(f"--label values must be distinct, got {args.label}")
    for workdir in args.workdir:
        trained_workdir(workdir)
    output_dir(args.out, "--out")
    out = run_logit_lens(args.workdir, args.out, args.label or None, args.tokens)
    for label, r in zip(out["labels"], out["results"]):
        print(f"{label}: step={r['step']} tokens={r['tokens']} kl=" + ",".join(f"{v:.4g}" for v in r["kl"])
              + " kl_reverse=" + ",".join(f"{v:.4g}" for v in r["kl_reverse"]))
    print(f"wrote {out['paths']['md']}, {out['paths']['csv']}, {out['paths']['png']}")
    return 0
