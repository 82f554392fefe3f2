"""``edge-jax bench cache-sim``: simulated accesses per second of every expert-cache policy.

One seeded synthetic routing trace (edge_jax.papers.expert_cache.synthetic, Zipf popularity, bursts, phase shifts)
of ``--accesses`` accesses (tokens x layers x top-k; default one million, 4 layers x top-2 of 16 experts)
is replayed under each policy at one capacity (default VRAM 20%, RAM 60% of all experts' bytes, the
pcie4-nvme profile). ScoutGate's probabilities are stood in for by the trace's own k-hot routing mixed
with uniform noise (0.6 k-hot + 0.4 U[0, 1)): the simulator's work per step does not depend on their
values, and training ScoutGate is not what this measures. Goal: every policy but Belady replays one
million accesses in under a minute on this CPU.
"""
from __future__ import annotations

import time

import numpy as np

from edge_jax.bench import Benchmark
from edge_jax.errors import ConfigError
from edge_jax.registry import BENCHMARKS
from edge_jax.utils.args import count, ratio
from edge_jax.utils.atomic import write_json_atomic

GOAL_S = 60.0


def run(args, overrides) -> str:
    from edge_jax.papers.expert_cache.config import base_config
    from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, Simulator, simulated_policies
    from edge_jax.papers.expert_cache.experiment import make_policy
    from edge_jax.papers.expert_cache.profile import build_profile, capacities
    from edge_jax.papers.expert_cache.scoutgate import k_hot
    from edge_jax.papers.expert_cache.synthetic import synthetic_routing
    if overrides:
        raise ConfigError("--config.* overrides do not apply to cache-sim; use its flags (--accesses, --layers, ...)")
    layers, experts, k = args.layers or 4, args.experts, args.top_k
    if min(args.accesses, layers, experts, k) <= 0 or k > experts:
        raise ConfigError("--accesses, --layers, --experts must be positive and --top-k in [1, --experts]")
    n_tokens = max(1, args.accesses // (layers * k))
    trace = synthetic_routing(n_tokens, layers, experts, k, seed=0, d_embed=8)
    c = base_config()
    c.profile.preset = args.profile
    prof = build_profile(c.profile, layers, experts)
    cap_g, cap_r = capacities(prof, args.vram, args.ram, k)
    rng = np.random.default_rng(0)
    scout = 0.6 * k_hot(trace.experts, experts) + 0.4 * rng.random((n_tokens, layers, experts), dtype=np.float32)
    rows = []
    for name in simulated_policies():
        c.cache.policy = name
        t0 = time.perf_counter()
        offline = CACHE_POLICIES.get(name).offline
        if offline is not None:
            st = offline(trace.experts, prof, cap_g, cap_r)[0]
        else:
            st = Simulator(prof, cap_g, cap_r).run(trace.experts, make_policy(c, scout))
        wall = time.perf_counter() - t0
        rows.append({"policy": name, "seconds": wall, "accesses_per_s": st.accesses / wall,
                     "stall_ms_per_token": st.metrics()["stall_ms_per_token"]})
    online = [r for r in rows if CACHE_POLICIES.get(r["policy"]).offline is None]
    slowest = max(online, key=lambda r: r["seconds"])
    scale = 1e6 / (n_tokens * layers * k)
    ok = slowest["seconds"] * scale < GOAL_S
    lines = [f"cache-sim: {n_tokens * layers * k:,} accesses ({n_tokens:,} tokens x {layers} layers x top-{k} of "
             f"{experts} experts), VRAM {args.vram:.0%} / RAM {args.ram:.0%}, profile {args.profile}",
             f"  {'policy':<10} {'seconds':>9} {'accesses/s':>12} {'stall ms/token':>15}"]
    lines += [f"  {r['policy']:<10} {r['seconds']:>9.2f} {r['accesses_per_s']:>12,.0f} {r['stall_ms_per_token']:>15.3f}"
              for r in rows]
    lines.append(f"  goal: every policy but Belady < {GOAL_S:.0f} s per million accesses; slowest {slowest['policy']} "
                 f"{slowest['seconds'] * scale:.1f} s per million: {'PASS' if ok else 'FAIL'}")
    if args.json:
        write_json_atomic(args.json, {"accesses": n_tokens * layers * k, "vram": args.vram, "ram": args.ram,
                                      "profile": args.profile, "rows": rows, "pass": ok})
        lines.append(f"  wrote {args.json}")
    return "\n".join(lines)


def add_arguments(group) -> None:
    group.add_argument("--accesses", type=count, default=1_000_000, help="accesses to replay (tokens x layers x top-k)")
    group.add_argument("--vram", type=ratio, default=0.2, help="VRAM capacity, fraction of all experts' bytes")
    group.add_argument("--ram", type=ratio, default=0.6, help="RAM capacity, fraction of all experts' bytes")
    group.add_argument("--profile", default="pcie4-nvme", help="device profile preset (pcie4-nvme, phone)")


BENCHMARKS.register("cache-sim", Benchmark(
    help="accesses per second of every expert-cache policy on a synthetic trace. Also takes --layers "
         "(default 4), --experts, --top-k, --json",
    run=run, add_arguments=add_arguments, writes_json=True))
