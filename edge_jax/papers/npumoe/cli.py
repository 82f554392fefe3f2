"""NPUMoE on the command line: ``edge-jax moe calibrate | trace``, the offline calibration and routing traces
of a trained run, and ``edge-jax bench moe`` (its flags; what it measures is :mod:`edge_jax.papers.npumoe.bench`).
Imports no JAX (:func:`edge_jax.plugins.load_cli`): the commands import their work when they run.

    edge-jax moe calibrate --workdir W [--data NAME] [--second-data NAME] [--batches N] [--config.moe.group=4 ...]
    edge-jax moe trace --workdir W [--data NAME] [--split validation] [--batches N] [--no-probs] --out DIR

``calibrate`` writes ``calibration.json`` (what ``moe.plan`` reads) and ``calibration.md`` into the
workdir (or ``--out``): per MoE layer the expert loads, popularity ranking, imbalance ratio and the
NPUMoE capacity plan the ``moe.*`` settings give (``--config.moe.*`` overrides apply), plus Overlap@K
of the calibration loads against held-out routing and against a second dataset. ``trace`` runs the
model dropless over held-out text (or ``--split train``) and writes a routing trace
(:mod:`edge_jax.data.routing_trace`); ``--no-probs`` leaves the router probabilities out (the top-k expert
ids stay), which makes a compressed trace about six times smaller.
"""
from __future__ import annotations

import dataclasses
import os

from edge_jax.bench import Benchmark
from edge_jax.errors import ConfigError
from edge_jax.registry import BENCHMARKS, COMMANDS
from edge_jax.utils.args import at_least, count, non_negative, output_dir, trained_workdir


@COMMANDS.register("moe")
def add_parser(sub):
    """``edge-jax moe``: its parser under ``sub`` (``--config.moe.*`` overrides apply)."""
    p = sub.add_parser("moe", help="NPUMoE calibration and routing traces of a trained MoE workdir")
    p.set_defaults(takes_overrides=True)
    cmds = p.add_subparsers(dest="moe_command", required=True)
    c = cmds.add_parser("calibrate", help="expert loads, imbalance, capacity plan and Overlap@K")
    c.add_argument("--workdir", required=True, help="a trained MoE run")
    c.add_argument("--data", default="", help="calibration dataset (default: the run's data.name)")
    c.add_argument("--second-data", default="", help="dataset of the cross-dataset Overlap@K (default: facts, "
                   "or pystdlib for facts)")
    c.add_argument("--batches", type=at_least(0), default=0, help="batches per dataset (default: moe.calib_batches)")
    c.add_argument("--out", default="", help="directory for calibration.json/.md (default: the workdir)")
    c.set_defaults(fn=_calibrate)
    t = cmds.add_parser("trace", help="record top-k routing of every token and layer on held-out text")
    t.add_argument("--workdir", required=True, help="a trained MoE run")
    t.add_argument("--data", default="", help="dataset (default: the run's data.name)")
    t.add_argument("--split", default="validation", help="split to trace (held-out text: validation)")
    t.add_argument("--batches", type=at_least(0), default=0,
                   help="batches of data.batch_size windows (0: the whole split)")
    t.add_argument("--no-probs", action="store_true",
                   help="leave the router probabilities out of the trace (about 6x smaller; expert ids stay)")
    t.add_argument("--out", required=True, help="directory; the trace is written as <data>_<split>.npz")
    t.set_defaults(fn=_trace)
    return p


def _restore(workdir: str, overrides):
    import ml_collections

    from edge_jax.config import apply_overrides, validate
    from edge_jax.models import DecoderLM
    from edge_jax.papers.npumoe.run_metrics import dropless_model
    from edge_jax.train.evaluate import restore_latest
    from edge_jax.train.setup import model_config
    run, state, step = restore_latest(workdir)
    if not run.model.cfg.moe_experts:
        raise ConfigError(f"{workdir} holds a dense model (model.moe_experts=0); calibrate and trace a MoE run")
    cfg = ml_collections.ConfigDict(run.config.to_dict())
    bad = [o for o in overrides if not o.startswith("moe.")]
    if bad:
        raise ConfigError(f"only --config.moe.* overrides apply to `edge-jax moe`, got {bad[0]!r}")
    cfg.moe.strategy = "npumoe"  # the plan NPUMoE would run, from the moe.* switches
    apply_overrides(cfg, overrides)
    cfg.train.steps = 0
    cfg.init_from = workdir
    validate(cfg)
    run = dataclasses.replace(run, config=cfg)
    return dataclasses.replace(run, model=dropless_model(DecoderLM(model_config(cfg)))), state.params, step


def _calibrate(args, overrides) -> int:
    from edge_jax.papers.npumoe.run_metrics import calibrate, write_report
    trained_workdir(args.workdir)
    out = args.out or args.workdir
    output_dir(out, "--out" if args.out else "--workdir")
    run, params, step = _restore(args.workdir, overrides)
    cal = calibrate(run, params, args.data, args.second_data, args.batches)
    os.makedirs(out, exist_ok=True)
    path, md = write_report(cal, run, out)
    with open(md) as f:
        print(f.read())
    print(f"wrote {path} and {md} (checkpoint step {step}); evaluate under this plan with "
          f"--config.moe.strategy=npumoe --config.moe.plan={path}")
    return 0


def _trace(args, overrides) -> int:
    from edge_jax.data.routing_trace import write_trace
    from edge_jax.papers.npumoe.capture import record_trace
    from edge_jax.papers.npumoe.run_metrics import eval_batches
    from edge_jax.utils.provenance import git_info
    trained_workdir(args.workdir)
    output_dir(args.out, "--out")
    run, params, step = _restore(args.workdir, overrides)
    data = args.data or run.config.data.name
    batches = eval_batches(run, data, args.split, args.batches)
    meta = {"workdir": os.path.abspath(args.workdir), "step": step, "data": data, "split": args.split,
            "tokenizer": run.tokenizer.name, "seq_len": run.config.data.seq_len, "git": git_info(".")}
    trace = record_trace(run.model, params, batches, run.model.cfg.moe_layer_ids(), meta)
    if args.no_probs:
        trace = dataclasses.replace(trace, probs=None)
    os.makedirs(args.out, exist_ok=True)
    path = write_trace(os.path.join(args.out, f"{data}_{args.split}.npz"), trace, compress=True)
    print(f"wrote {path}: {trace.n_tokens:,} tokens in {len(trace.seq_starts)} sequences, {trace.n_layers} MoE "
          f"layers x top-{trace.top_k} of {trace.n_experts} experts{'' if trace.probs is not None else ' (no probs)'}")
    return 0


# --- `edge-jax bench moe` (edge_jax.bench.command is the harness)

MOE_CHUNK = 512  # --chunk default: the tiny NPUMoE model's prefill chunk (configs/npumoe.py)


def _bench_arguments(group) -> None:
    group.add_argument("--chunks", type=count, default=4, help="prefill chunks per timed round")
    group.add_argument("--zipf", type=non_negative, default=1.0, help="router skew: expert popularity ~ 1 / rank^zipf")
    group.add_argument("--group", type=count, default=4, help="experts per grouped call")
    group.add_argument("--overflow", default="drop", help="moe.overflow of the variants (a name in "
                       "edge_jax.layers.moe.strategies.OVERFLOW_POLICIES): drop the copies beyond an expert's capacity "
                       "(drop), or run them in the host CPU fallback call (fallback)")
    group.add_argument("--capacities", default="", help="also time the Table 5 sweep at these capacities "
                       "(e.g. 32,64,128), every expert at one capacity, under both overflow policies")
    group.add_argument("--sweep-groups", default="1,8", help="group sizes of the Table 5 sweep")


BENCHMARKS.register("moe", Benchmark(
    help="NPUMoE Fig. 17 ablation and Table 5 grouping on one synthetic MoE layer. Also takes --d-model "
         "(default 128), --d-ff (expert width, default 128), --experts, --top-k, --chunk (default 512), "
         "--repeats, --json",
    run="edge_jax.papers.npumoe.bench:run", add_arguments=_bench_arguments, defaults={"chunk": MOE_CHUNK},
    writes_json=True))
