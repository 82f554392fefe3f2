"""The expert cache on the command line: ``edge-jax cache run | synth``, one expert-cache simulation or a
synthetic routing trace file, and ``edge-jax bench cache-sim`` (its flags; what it measures is
:mod:`edge_jax.papers.expert_cache.bench`). Imports no JAX (:func:`edge_jax.plugins.load_cli`).

    edge-jax cache run --config configs/cache.py:trace=real --workdir W [--config.cache.policy=lru ...]
    edge-jax cache synth --out trace.npz [--tokens N --layers L --experts E --top-k K --seed S]

``run`` replays a routing trace under one policy and capacity (edge_jax.papers.expert_cache.experiment) and
prints its metrics; ``synth`` writes a seeded synthetic trace (Zipf popularity, bursts, phase shifts)
in the routing-trace format, for stress runs with ``trace.path``.
"""
from __future__ import annotations

import json

from edge_jax.bench import Benchmark
from edge_jax.errors import ConfigError
from edge_jax.registry import BENCHMARKS, COMMANDS
from edge_jax.utils.args import at_least, count, output_dir, output_file, ratio


@COMMANDS.register("cache")
def add_parser(sub):
    """``edge-jax cache``: its parser under ``sub`` (``--config.*`` overrides apply to ``cache run``)."""
    p = sub.add_parser("cache", help="two-tier MoE expert cache: simulate a policy, write synthetic traces")
    p.set_defaults(takes_overrides=True)
    cmds = p.add_subparsers(dest="cache_command", required=True)
    r = cmds.add_parser("run", help="simulate one policy at one capacity on a routing trace")
    r.add_argument("--config", required=True, help="path/to/config.py[:arg], e.g. configs/cache.py:trace=real")
    r.add_argument("--workdir", required=True, help="writes config.json, final_metrics.json (and scoutgate.npz)")
    r.set_defaults(fn=_run)
    s = cmds.add_parser("synth", help="write a seeded synthetic routing trace (.npz)")
    s.add_argument("--out", required=True, help="trace file to write")
    s.add_argument("--tokens", type=count, default=65536)
    s.add_argument("--layers", type=count, default=4)
    s.add_argument("--experts", type=count, default=16)
    s.add_argument("--top-k", type=count, default=2, help="experts per token (<= --experts)")
    s.add_argument("--seed", type=at_least(0), default=0)
    s.set_defaults(fn=_synth)
    return p


def _run(args, overrides) -> int:
    from edge_jax.config import load_config, task_of
    from edge_jax.papers.expert_cache.config import TASK
    from edge_jax.papers.expert_cache.experiment import run_experiment
    output_dir(args.workdir, "--workdir")
    c = load_config(args.config, overrides)
    if task_of(c) != TASK:
        raise ConfigError(f"{args.config} is not an expert-cache config (task={TASK}); use configs/cache.py")
    metrics = run_experiment(c, args.workdir)
    print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}, indent=1))
    return 0


def _synth(args, overrides) -> int:
    from edge_jax.data.routing_trace import write_trace
    from edge_jax.papers.expert_cache.synthetic import synthetic_routing
    if overrides:
        raise ConfigError("--config.* overrides do not apply to `edge-jax cache synth`")
    output_file(args.out, "--out")
    try:
        trace = synthetic_routing(args.tokens, args.layers, args.experts, args.top_k, seed=args.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    path = write_trace(args.out, trace, compress=True)
    print(f"wrote {path}: {trace.n_tokens:,} tokens in {len(trace.seq_starts)} sequences, {trace.n_layers} layers "
          f"x top-{trace.top_k} of {trace.n_experts} experts")
    return 0


# --- `edge-jax bench cache-sim` (edge_jax.bench.command is the harness)


def _bench_arguments(group) -> None:
    group.add_argument("--accesses", type=count, default=1_000_000, help="accesses to replay (tokens x layers x top-k)")
    group.add_argument("--vram", type=ratio, default=0.2, help="VRAM capacity, fraction of all experts' bytes")
    group.add_argument("--ram", type=ratio, default=0.6, help="RAM capacity, fraction of all experts' bytes")
    group.add_argument("--profile", default="pcie4-nvme", help="device profile preset (pcie4-nvme, phone)")
    group.add_argument("--reference-accesses", type=count, default=100_000,
                       help="accesses the reference simulator replays (the trace's first ones)")


BENCHMARKS.register("cache-sim", Benchmark(
    help="accesses per second of every expert-cache policy, compiled and reference, on a synthetic trace. "
         "Also takes --layers "
         "(default 4), --experts, --top-k, --repeats (timed compiled replays, default 3), --json",
    run="edge_jax.papers.expert_cache.bench:run", add_arguments=_bench_arguments, defaults={"repeats": 3},
    writes_json=True))
