"""``edge-jax bench cache-sim``: simulated accesses per second of every expert-cache policy, compiled and reference.

One seeded synthetic routing trace (edge_jax.papers.expert_cache.synthetic, Zipf popularity, bursts, phase shifts)
of ``--accesses`` accesses (tokens x layers x top-k; default one million, 4 layers x top-2 of 16 experts, the
real traces' shape) is replayed under each policy at one capacity (default VRAM 20%, RAM 60% of all experts'
bytes, the pcie4-nvme profile): by the compiled simulator (compiled_sim.simulate, compiled_belady), and by
the reference (engine.Simulator with policies.py / watermark.py, belady's numpy functions) on the first
``--reference-accesses`` of it, in the same run. ScoutGate's probabilities are stood in for by the trace's own
k-hot routing mixed with uniform noise (0.6 k-hot + 0.4 U[0, 1)): the simulator's work per step does not
depend on their values, and training ScoutGate is not what this measures. Each figure is the median of
``--repeats`` runs (min-max beside it); numba's compilation (or loading its cache) is done on a short trace
first and not timed. Goal: at least 5 M accesses/s for every policy but Belady, 1 M/s for Belady. The
compiled and reference runs of the shared prefix must agree exactly, or the benchmark fails.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.utils.atomic import write_json_atomic

GOAL_ONLINE, GOAL_OFFLINE = 5e6, 1e6     # accesses per second


def _replay(name, c, experts, scout, prof, cap_g, cap_r, compiled: bool):
    """(SimStats, seconds) of one replay of ``experts`` under policy ``name``."""
    from edge_jax.papers.expert_cache.belady import belady
    from edge_jax.papers.expert_cache.compiled_sim import simulate
    from edge_jax.papers.expert_cache.engine import Simulator
    from edge_jax.papers.expert_cache.experiment import make_policy
    c.cache.policy = name
    t0 = time.perf_counter()
    if name == "belady":
        st = belady(experts, prof, cap_g, cap_r, compiled=compiled)[0]
    else:
        policy = make_policy(c, scout[: len(experts)])
        st = (simulate(experts, prof, cap_g, cap_r, policy) if compiled
              else Simulator(prof, cap_g, cap_r).run(experts, policy))
    return st, time.perf_counter() - t0


def _same(a, b) -> bool:
    return {**dataclasses.asdict(a), "wall_s": 0} == {**dataclasses.asdict(b), "wall_s": 0}


def run(args, overrides) -> str:
    from edge_jax.papers.expert_cache.config import base_config
    from edge_jax.papers.expert_cache.engine import simulated_policies
    from edge_jax.papers.expert_cache.profile import build_profile, capacities
    from edge_jax.papers.expert_cache.scoutgate import k_hot
    from edge_jax.papers.expert_cache.synthetic import synthetic_routing
    if overrides:
        raise ConfigError("--config.* overrides do not apply to cache-sim; use its flags (--accesses, --layers, ...)")
    layers, experts, k = args.layers or 4, args.experts, args.top_k
    if min(args.accesses, layers, experts, k) <= 0 or k > experts:
        raise ConfigError("--accesses, --layers, --experts must be positive and --top-k in [1, --experts]")
    n_tokens = max(1, args.accesses // (layers * k))
    n_ref = max(1, min(n_tokens, args.reference_accesses // (layers * k)))
    trace = synthetic_routing(n_tokens, layers, experts, k, seed=0, d_embed=8)
    c = base_config()
    c.profile.preset = args.profile
    prof = build_profile(c.profile, layers, experts)
    cap_g, cap_r = capacities(prof, args.vram, args.ram, k)
    rng = np.random.default_rng(0)
    scout = 0.6 * k_hot(trace.experts, experts) + 0.4 * rng.random((n_tokens, layers, experts), dtype=np.float32)
    rows = []
    for name in simulated_policies():
        _replay(name, c, trace.experts[:64], scout, prof, cap_g, cap_r, compiled=True)   # compile / load the cache
        fast = [_replay(name, c, trace.experts, scout, prof, cap_g, cap_r, compiled=True) for _ in range(args.repeats)]
        ref, ref_s = _replay(name, c, trace.experts[:n_ref], scout, prof, cap_g, cap_r, compiled=False)
        same = _same(ref, _replay(name, c, trace.experts[:n_ref], scout, prof, cap_g, cap_r, compiled=True)[0])
        rates = [st.accesses / s for st, s in fast]
        goal = GOAL_OFFLINE if name == "belady" else GOAL_ONLINE
        rows.append({"policy": name, "accesses_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                     "reference_accesses_per_s": ref.accesses / ref_s, "identical": same, "goal": goal,
                     "stall_ms_per_token": fast[0][0].metrics()["stall_ms_per_token"]})
    ok = all(r["accesses_per_s"] >= r["goal"] and r["identical"] for r in rows)
    lines = [f"cache-sim: {n_tokens * layers * k:,} accesses ({n_tokens:,} tokens x {layers} layers x top-{k} of "
             f"{experts} experts), VRAM {args.vram:.0%} / RAM {args.ram:.0%}, profile {args.profile}; reference on "
             f"the first {n_ref * layers * k:,}; median of {args.repeats}",
             f"  {'policy':<13} {'compiled/s':>12} {'(min-max)':>23} {'reference/s':>12} {'speed-up':>9} "
             f"{'identical':>9} {'goal/s':>6} {'stall ms/token':>15}"]
    lines += [f"  {r['policy']:<13} {r['accesses_per_s']:>12,.0f} {_span(r):>23} "
              f"{r['reference_accesses_per_s']:>12,.0f} {r['accesses_per_s'] / r['reference_accesses_per_s']:>8.0f}x "
              f"{'yes' if r['identical'] else 'NO':>9} {r['goal'] / 1e6:>5.0f}M {r['stall_ms_per_token']:>15.3f}"
              for r in rows]
    lines.append(f"  goal: >= {GOAL_ONLINE / 1e6:.0f} M accesses/s for every policy but Belady, >= "
                 f"{GOAL_OFFLINE / 1e6:.0f} M for Belady, compiled = reference: {'PASS' if ok else 'FAIL'}")
    if args.json:
        write_json_atomic(args.json, {"accesses": n_tokens * layers * k, "reference_accesses": n_ref * layers * k,
                                      "vram": args.vram, "ram": args.ram, "profile": args.profile,
                                      "repeats": args.repeats, "rows": rows, "pass": ok})
        lines.append(f"  wrote {args.json}")
    return "\n".join(lines)


def _span(r) -> str:
    return f"({r['min']:,.0f}-{r['max']:,.0f})"
