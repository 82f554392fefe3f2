"""PLM on the command line: ``edge-jax analyze kv-cache | sparsity`` (KV-cache accounting, activation
sparsity) and ``edge-jax bench mla-decode`` (its flags; what it measures is :mod:`edge_jax.papers.plm.bench`).
Imports no JAX (:func:`edge_jax.plugins.load_cli`): the commands import their work when they run."""
from __future__ import annotations

from edge_jax.bench import Benchmark
from edge_jax.errors import ConfigError
from edge_jax.registry import BENCHMARKS, COMMANDS
from edge_jax.utils.args import at_least, count, non_negative, output_dir, trained_workdir
from edge_jax.utils.workdirs import add_workdir_arguments


@COMMANDS.register("analyze kv-cache")
def add_kv_cache_parser(analyses):
    """The ``kv-cache`` analysis under ``edge-jax analyze`` (``--config.*`` overrides apply)."""
    p = analyses.add_parser("kv-cache", help="KV-cache bytes per token, PLM eqs. (6)-(7) vs the decoder's "
                            "cache arrays, for a model and its MHA twin (no workdir; --config.* overrides apply)")
    p.add_argument("--config", required=True, help="path/to/config.py[:arg], e.g. configs/plm.py:size=1p8b")
    p.add_argument("--tokens", type=at_least(0), default=0,
                   help="tokens to size the measured cache for (0: data.seq_len)")
    p.add_argument("--bits", type=at_least(0), default=0, help="bit width in the formulas (0: the model dtype's, "
                   "32 for float32, 16 for bfloat16); the arrays keep the model dtype")
    p.add_argument("--batch", type=count, default=1, help="sequences in the measured cache")
    p.set_defaults(fn=_kv_cache, takes_overrides=True)
    return p


@COMMANDS.register("analyze sparsity")
def add_sparsity_parser(analyses):
    """The ``sparsity`` analysis under ``edge-jax analyze``."""
    p = analyses.add_parser("sparsity", help="PLM Algorithm 1: perplexity vs masked FFN activations (Fig. 11)")
    add_workdir_arguments(p)
    p.add_argument("--batches", type=count, default=4, help="validation batches to measure perplexity on")
    p.add_argument("--ratios", default="", help="masked fractions in [0, 1], comma-separated "
                   "(default: 0, 0.05, ..., 1)")
    p.add_argument("--max-ppl-increase", type=non_negative, default=1.0,
                   help="absolute Δppl limit of Algorithm 1 (paper: 1), for sparsity_rate_abs")
    p.add_argument("--max-rel-increase", type=non_negative, default=0.01,
                   help="relative limit, Δppl as a fraction of the unmasked perplexity, for the headline "
                        "sparsity_rate (default 0.01: 1%%)")
    p.add_argument("--out", required=True, help="writes sparsity.md, .csv and .png here")
    p.set_defaults(fn=_sparsity)
    return p


def _kv_cache(args, overrides) -> int:
    from edge_jax.config import load_config
    from edge_jax.papers.plm.kv_cache import kv_cache_report
    print(kv_cache_report(load_config(args.config, overrides), args.tokens, args.bits, args.batch, args.config))
    return 0


def _sparsity(args, overrides) -> int:
    from edge_jax.papers.plm.sparsity import check_ratios
    from edge_jax.papers.plm.sparsity_report import run_sparsity
    try:
        ratios = check_ratios(args.ratios.split(",")) if args.ratios else None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for workdir in args.workdir:
        trained_workdir(workdir)
    output_dir(args.out, "--out")
    out = run_sparsity(args.workdir, args.out, args.label or None, args.batches, ratios, args.max_ppl_increase,
                       args.max_rel_increase)
    for label, r in zip(out["labels"], out["results"]):
        print(f"{label}: step={r['step']} ffn={r['ffn']} base_ppl={r['base_ppl']:.4f} "
              f"sparsity_rate={r['sparsity_rate']:.4f} sparsity_rate_abs={r['sparsity_rate_abs']:.4f} "
              f"zero_fraction={r['zero_fraction']:.4f} "
              f"executed_fraction={r['executed_fraction']:.4f}")
    print("wrote " + ", ".join(str(p) for p in out["paths"]))
    return 0


# --- `edge-jax bench mla-decode` (edge_jax.bench.command is the harness)

DEFAULT_CONTEXTS = (1024, 4096, 8192)
DEFAULT_STEPS = 4


def _bench_arguments(group) -> None:
    group.add_argument("--d-rope", type=count, default=None, help="MLA RoPE key width (default 64)")
    group.add_argument("--kv-lora-rank", type=count, default=None, help="MLA latent width d_c (default 512)")
    group.add_argument("--contexts", default=",".join(map(str, DEFAULT_CONTEXTS)),
                       help="comma-separated cache fill levels")
    group.add_argument("--decode-steps", type=count, default=DEFAULT_STEPS, help="decode steps per timed round")


BENCHMARKS.register("mla-decode", Benchmark(
    help="MLA (naive, absorbed) vs its MHA twin. Also takes --d-model, --layers, --heads, --kv-heads (the twin's; "
         "default --heads), --head-dim, --d-ff, --vocab, --batch, --dtype, --repeats; default shape: d_model 2048, "
         "2 layers, 16 heads x 128, d_ff 2048, vocab 4096",
    run="edge_jax.papers.plm.bench:run", add_arguments=_bench_arguments, writes_json=True))
