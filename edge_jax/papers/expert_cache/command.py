"""``edge-jax cache run | synth``: one expert-cache simulation, or a synthetic routing trace file.

    edge-jax cache run --config configs/cache.py:trace=real --workdir W [--config.cache.policy=lru ...]
    edge-jax cache synth --out trace.npz [--tokens N --layers L --experts E --top-k K --seed S]

``run`` replays a routing trace under one policy and capacity (edge_jax.papers.expert_cache.experiment) and
prints its metrics; ``synth`` writes a seeded synthetic trace (Zipf popularity, bursts, phase shifts)
in the routing-trace format, for stress runs with ``trace.path``.
"""
from __future__ import annotations

import json

from edge_jax.config import ConfigError


def add_arguments(sub) -> None:
    p = sub.add_parser("cache", help="two-tier MoE expert cache: simulate a policy, write synthetic traces")
    cmds = p.add_subparsers(dest="cache_command", required=True)
    r = cmds.add_parser("run", help="simulate one policy at one capacity on a routing trace")
    r.add_argument("--config", required=True, help="path/to/config.py[:arg], e.g. configs/cache.py:trace=real")
    r.add_argument("--workdir", required=True, help="writes config.json, final_metrics.json (and scoutgate.npz)")
    r.set_defaults(fn=_run)
    s = cmds.add_parser("synth", help="write a seeded synthetic routing trace (.npz)")
    s.add_argument("--out", required=True, help="trace file to write")
    s.add_argument("--tokens", type=int, default=65536)
    s.add_argument("--layers", type=int, default=4)
    s.add_argument("--experts", type=int, default=16)
    s.add_argument("--top-k", type=int, default=2)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=_synth)


def _run(args, overrides) -> int:
    from edge_jax.papers.expert_cache.experiment import run_experiment
    from edge_jax.config import is_cache_sim, load_config
    c = load_config(args.config, overrides)
    if not is_cache_sim(c):
        raise ConfigError(f"{args.config} is not an expert-cache config (task=cache_sim); use configs/cache.py")
    metrics = run_experiment(c, args.workdir)
    print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}, indent=1))
    return 0


def _synth(args, overrides) -> int:
    from edge_jax.papers.expert_cache.synthetic import synthetic_routing
    from edge_jax.papers.npumoe.traces import write_trace
    if overrides:
        raise ConfigError("--config.* overrides do not apply to `edge-jax cache synth`")
    try:
        trace = synthetic_routing(args.tokens, args.layers, args.experts, args.top_k, seed=args.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    path = write_trace(args.out, trace, compress=True)
    print(f"wrote {path}: {trace.n_tokens:,} tokens in {len(trace.seq_starts)} sequences, {trace.n_layers} layers "
          f"x top-{trace.top_k} of {trace.n_experts} experts")
    return 0
