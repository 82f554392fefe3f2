"""``edge-jax bench moe``: NPUMoE expert execution, the Fig. 17 ablation and the Table 5 grouping effect.

One synthetic MoE layer (random SwiGLU experts, scale 1/sqrt(fan-in)) and a skewed router: token
logits are Gaussian noise plus a per-expert bias log(Zipf popularity) (popularity ranks shuffled
over the experts), the top-k of their softmax are the routes and weights. Expert loads are calibrated
on separate chunks from the same router, never on the timed ones. Saliency scores are random positive.

Every variant is a :class:`edge_jax.papers.npumoe.runtime.LayerRuntime`: its expert calls are separately
dispatched jitted calls, as NPU graph launches are. Variants (all on the same timed chunks):

* ``base``: one call per expert, every expert at the busiest capacity ``I * base`` (Ours-base);
* ``+tiers``: static capacity tiers from the calibrated loads, one call per expert (Ours-T);
* ``+grouping``: the tiers, same-tier experts in groups of ``--group`` (Ours-TG);
* ``+residency``: the hot half of the experts grouped, the cold half on the host CPU fallback
  (execute.host_experts: numpy, each cold expert on exactly its tokens) (Ours-all);
* ``per_expert`` / ``grouped``: every expert at the base capacity ``chunk * k / E``, one call per
  expert vs groups of ``--group`` (Table 5 at one capacity).

``--overflow`` (``moe.overflow``) says what these variants do with the copies beyond an expert's
capacity: ``drop`` them (default) or run them on the host CPU fallback call (``fallback``). With
``--capacities 32,64,128``, the Table 5 sweep is timed in the same rounds: every expert at each capacity,
in groups of each of ``--sweep-groups`` (default 1,8), under both overflow policies; it prints each
cell's median ms/token with the spread of the rounds (25th-75th percentile), drop % and fallback %, and
per group the latency ratio of the smallest capacity to the largest (the paper's 1x32 -> 1x128: 1.94x).

They are timed interleaved (:func:`edge_jax.utils.timing.time_interleaved`; a round runs all timed
chunks, blocked on at its end); reported per variant: ms per token, expert calls per chunk, padding
(padded rows / computed rows; computed = buffer rows + fallback rows), drops (dropped copies /
routed copies), and the max |difference| on the first chunk against execute.capacity_moe for the
same plan. Two lines help read the ratios: the host cost of one trivial jitted dispatch (what grouping
saves per call), and the fallback call alone, timed in the same rounds.
Goals: grouped >= 1.3x per_expert (paper 1.15-1.28x), all >= 2.5x base (paper 2.89x).
"""
from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import (
    base_capacity,
    busiest_capacity,
    imbalance_ratio,
    tiered_plan,
    uniform_plan,
)
from edge_jax.layers.moe.strategies import OVERFLOW_POLICIES
from edge_jax.papers.npumoe.cli import MOE_CHUNK
from edge_jax.papers.npumoe.runtime import LayerRuntime
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.timing import samples_interleaved

DEFAULTS = dict(d_model=128, d_ff=128, chunk=MOE_CHUNK)  # the tiny NPUMoE model's layer (configs/npumoe.py)
CALIBRATION_CHUNKS = 8
ABLATION = ("base", "+tiers", "+grouping", "+residency")
GROUPING = ("per_expert", "grouped")
GOALS = {"grouped": 1.3, "all": 2.5}
PAPER = {"grouped": "1.15-1.28x", "all": "2.89x"}


def router(rng, n_experts: int, zipf: float):
    """``route(n, k) -> (ids_NJ, w_NJ)``: Gaussian logits + log Zipf popularity (shuffled), top-k softmax."""
    pop_E = 1.0 / np.arange(1, n_experts + 1) ** zipf
    bias_E = rng.permutation(np.log(pop_E / pop_E.sum()))

    def route(n, k):
        logits_NE = rng.normal(size=(n, n_experts)) + bias_E
        p_NE = np.exp(logits_NE - logits_NE.max(-1, keepdims=True))
        p_NE /= p_NE.sum(-1, keepdims=True)
        ids_NJ = np.argsort(-p_NE, axis=-1, kind="stable")[:, :k]
        return ids_NJ.astype(np.int32), np.take_along_axis(p_NE, ids_NJ, -1).astype(np.float32)
    return route


def synthetic_layer(d: int, d_ff: int, n_experts: int, top_k: int, chunk: int, chunks: int, zipf: float,
                    seed: int = 0):
    """``(experts, timed chunks, calibrated load_E)``; chunks are ``(x, ids, w, score, valid)``."""
    rng = np.random.default_rng(seed)
    experts = tuple(jnp.asarray(rng.normal(size=s) / np.sqrt(s[1]), jnp.float32)
                    for s in ((n_experts, d, d_ff), (n_experts, d, d_ff), (n_experts, d_ff, d)))
    route = router(rng, n_experts, zipf)
    calib_ids = route(CALIBRATION_CHUNKS * chunk, top_k)[0]
    load_E = np.bincount(calib_ids.reshape(-1), minlength=n_experts)
    timed = []
    for _ in range(chunks):
        ids, w = route(chunk, top_k)
        x = rng.normal(size=(chunk, d)).astype(np.float32)
        score = rng.uniform(0.1, 1.0, chunk).astype(np.float32)
        timed.append(tuple(jnp.asarray(a) for a in (x, ids, w, score, np.ones(chunk, bool))))
    return experts, timed, load_E


def variant_plans(load_E, chunk: int, top_k: int, group: int) -> dict:
    n = len(load_E)
    busiest, base = busiest_capacity(load_E, chunk, top_k), base_capacity(chunk, top_k, n)
    return {"base": uniform_plan(n, busiest, 1),
            "+tiers": tiered_plan(load_E, chunk, top_k, group=1, hot_fraction=1.0),
            "+grouping": tiered_plan(load_E, chunk, top_k, group=group, hot_fraction=1.0),
            "+residency": tiered_plan(load_E, chunk, top_k, group=group, hot_fraction=0.5),
            "per_expert": uniform_plan(n, base, 1),
            "grouped": uniform_plan(n, base, group)}


def describe(plan) -> str:
    """Capacities and group sizes, e.g. ``C 128x4 64x8 (G 4) + 4 fallback``."""
    caps = [plan.capacity[g[0]] for g in plan.groups for _ in g]
    tiers = " ".join(f"{c}x{caps.count(c)}" for c in sorted(set(caps), reverse=True))
    sizes = sorted({len(g) for g in plan.groups})
    text = f"C {tiers} (G {'/'.join(map(str, sizes))})"
    return text + (f" + {len(plan.fallback)} fallback" if plan.fallback else "")


def dispatch_overhead_us(calls: int = 300) -> float:
    """Host cost of one asynchronous dispatch of a trivial jitted call (blocked on once, at the end)."""
    add_one = jax.jit(lambda a: a + 1)
    a = jax.block_until_ready(add_one(jnp.zeros(8)))
    t0 = time.perf_counter()
    for _ in range(calls):
        a = add_one(a)
    jax.block_until_ready(a)
    return (time.perf_counter() - t0) / calls * 1e6


def sweep_plans(n_experts: int, capacities, groups) -> dict:
    """Table 5 cells ``(overflow, "g<group>_c<capacity>") -> uniform plan``, under both overflow policies."""
    return {(o, f"g{g}_c{c}"): uniform_plan(n_experts, c, g) for o in ("drop", "fallback")
            for g in groups for c in capacities}


def _row(rt, plan, timed, experts, reference, overflow: str, chunks: int) -> dict:
    """A variant's plan, calls, padding, drop and fallback shares, and max |diff| against capacity_moe."""
    y = rt(*timed[0])
    assert rt.dispatched == rt.expert_calls == plan.expert_calls(rt.exact_overflow)
    totals = {k: 0 for k in ("routed", "kept", "dropped", "fallback", "padded")}
    for i, c in enumerate(timed):
        want, stats = reference(*c, experts, plan, overflow=overflow)
        totals = {k: v + int(stats[k]) for k, v in totals.items()}
        if i == 0:
            diff = float(jnp.max(jnp.abs(y - want)))
    computed = plan.buffer_rows * chunks + totals["fallback"]
    return {"plan": describe(plan), "calls": rt.expert_calls, "buffer_rows": plan.buffer_rows,
            "padding": totals["padded"] / max(computed, 1), "drop": totals["dropped"] / max(totals["routed"], 1),
            "fallback": totals["fallback"] / max(totals["routed"], 1), "max_diff": diff}


def measure(d: int, d_ff: int, n_experts: int, top_k: int, chunk: int, chunks: int, zipf: float, group: int,
            repeats: int, seed: int = 0, kernels: str = "xla", overflow: str = "drop", capacities=(),
            sweep_groups=(1, 8)) -> dict:
    """``kernels``: ``model.kernels`` of the runtime's static groups (the ``expert_ffn`` kernel or XLA);
    ``overflow``: ``moe.overflow`` of the variants; ``capacities``: the Table 5 sweep (none if empty)."""
    experts, timed, load_E = synthetic_layer(d, d_ff, n_experts, top_k, chunk, chunks, zipf, seed)
    plans = variant_plans(load_E, chunk, top_k, group)
    runtimes = {name: LayerRuntime(plan, experts, kernels, overflow) for name, plan in plans.items()}
    sweep = sweep_plans(n_experts, capacities, sweep_groups) if capacities else {}
    sweep_rt = {key: LayerRuntime(plan, experts, kernels, key[0]) for key, plan in sweep.items()}
    reference = jax.jit(execute.capacity_moe, static_argnums=6, static_argnames="overflow")
    rows = {name: _row(rt, plans[name], timed, experts, reference, overflow, chunks) for name, rt in runtimes.items()}
    sweep_rows = {key: _row(rt, sweep[key], timed, experts, reference, key[0], chunks) for key, rt in sweep_rt.items()}
    tokens = chunk * chunks
    fns = {name: (lambda rt=rt: [rt(*c) for c in timed]) for name, rt in runtimes.items()}
    fns["fallback_only"] = lambda rt=runtimes["+residency"]: [rt.fallback(c[0], c[1], c[2], c[4]) for c in timed]
    fns.update({key: (lambda rt=rt: [rt(*c) for c in timed]) for key, rt in sweep_rt.items()})
    samples = samples_interleaved(fns, repeats, tokens)
    secs = {name: statistics.median(s) for name, s in samples.items()}
    for name in rows:
        rows[name]["ms_per_token"] = secs[name] * 1e3
    for key, row in sweep_rows.items():
        q = np.percentile(np.asarray(samples[key]) * 1e3, [25, 75])
        row.update(ms_per_token=secs[key] * 1e3, ms_p25=float(q[0]), ms_p75=float(q[1]))
    speedup = {name: secs["base"] / secs[name] for name in ABLATION}
    step = {name: secs[prev] / secs[name] for prev, name in zip(ABLATION, ABLATION[1:])}
    return {"variants": rows, "fallback_experts": list(plans["+residency"].fallback), "speedup_vs_base": speedup,
            "speedup_vs_previous": step,
            "grouped_vs_per_expert": secs["per_expert"] / secs["grouped"],
            "fallback_ms_per_chunk": secs["fallback_only"] * chunk * 1e3,
            "dispatch_us": dispatch_overhead_us(), "imbalance": imbalance_ratio(load_E), "load_E": load_E.tolist(),
            "base_capacity": base_capacity(chunk, top_k, n_experts),
            "busiest_capacity": busiest_capacity(load_E, chunk, top_k), "overflow": overflow,
            "sweep": {o: {name: row for (o2, name), row in sweep_rows.items() if o2 == o}
                      for o in ("drop", "fallback")} if sweep else {}}


def sweep_lines(r: dict) -> list[str]:
    """The Table 5 sweep block of the report (empty without ``--capacities``)."""
    if not r["sweep"]:
        return []
    lines = ["  Table 5 sweep (uniform capacity per chunk; ms/token median [p25-p75] of the rounds):",
             f"  {'overflow':<9} {'cell':<9} {'ms/token':>9} {'spread':>17} {'drop':>7} {'fallback':>8} {'calls':>5}"]
    for o, cells in r["sweep"].items():
        for name, v in cells.items():
            lines.append(f"  {o:<9} {name:<9} {v['ms_per_token']:9.4f} [{v['ms_p25']:7.4f}-{v['ms_p75']:7.4f}] "
                         f"{v['drop']:7.1%} {v['fallback']:8.1%} {v['calls']:5d}")
    for o, cells in r["sweep"].items():
        groups = sorted({int(n[1:].split("_")[0]) for n in cells})
        caps = sorted({int(n.split("_c")[1]) for n in cells})
        if len(caps) > 1:
            ms = {n: v["ms_per_token"] for n, v in cells.items()}
            ratios = ", ".join(f"g{g} {ms[f'g{g}_c{caps[0]}'] / ms[f'g{g}_c{caps[-1]}']:.2f}x" for g in groups)
            lines.append(f"  {o}: latency c{caps[0]} / c{caps[-1]} = {ratios} (> 1: falls with capacity; "
                         "paper 1x32 / 1x128 = 1.94x)")
    return lines


def format_report(shape: dict, r: dict, repeats: int) -> str:
    dev = jax.devices()[0]
    s = shape
    lines = [f"moe benchmark (NPUMoE Fig. 17 / Table 5): d_model {s['d']}, d_ff {s['d_ff']}, {s['experts']} experts "
             f"top-{s['top_k']}, chunk {s['chunk']} x {s['chunks']} timed chunks, zipf {s['zipf']}, group "
             f"{s['group']}; {dev.platform} ({dev.device_kind}); model.kernels {s['kernels']}; overflow "
             f"{s['overflow']}; {repeats} rounds, median",
             f"  calibration: {CALIBRATION_CHUNKS} separate chunks, imbalance I = {r['imbalance']:.2f}, base capacity "
             f"{r['base_capacity']}, busiest I*base = {r['busiest_capacity']}; cold experts on the host CPU",
             f"  {'variant':<16} {'plan':<42} {'ms/token':>9} {'calls/chunk':>11} {'padding':>8} {'drop':>7} "
             f"{'max|diff|':>10}"]
    for name in ABLATION + GROUPING:
        v = r["variants"][name]
        label = "+residency (all)" if name == "+residency" else name
        lines.append(f"  {label:<16} {v['plan']:<42} {v['ms_per_token']:9.4f} {v['calls']:11d} "
                     f"{v['padding']:8.1%} {v['drop']:7.2%} {v['max_diff']:10.2e}")
    sp, st = r["speedup_vs_base"], r["speedup_vs_previous"]
    res, per = r["variants"]["+residency"], r["variants"]["per_expert"]
    res_chunk = res["ms_per_token"] * s["chunk"]
    lines.append(f"  dispatch: one jitted call costs {r['dispatch_us']:.0f} us on the host; per_expert's "
                 f"{per['calls']} calls are "
                 f"{per['calls'] * r['dispatch_us'] / 1e3 / (per['ms_per_token'] * s['chunk']):.1%} "
                 f"of its time per chunk")
    lines.append(f"  fallback call alone (host CPU, {len(r['fallback_experts'])} experts): "
                 f"{r['fallback_ms_per_chunk']:.2f} ms per chunk = {r['fallback_ms_per_chunk'] / res_chunk:.0%} of "
                 f"+residency's {res_chunk:.2f} ms")
    lines.append(f"  ratios: grouped/per_expert = {r['grouped_vs_per_expert']:.2f}x (paper Table 5: "
                 f"{PAPER['grouped']} at group 4-8)")
    lines.append("  ablation vs base: " + ", ".join(f"{n} {sp[n]:.2f}x" for n in ABLATION[1:])
                 + "; vs previous step: " + ", ".join(f"{n} {st[n]:.2f}x" for n in ABLATION[1:])
                 + f"; all vs base = {sp['+residency']:.2f}x (paper Fig. 17: {PAPER['all']})")
    for key, value, text in (("grouped", r["grouped_vs_per_expert"], "grouped >= {:.1f}x per_expert"),
                             ("all", sp["+residency"], "all >= {:.1f}x base")):
        verdict = "PASS" if value >= GOALS[key] else "FAIL"
        lines.append(f"  {verdict}: {text.format(GOALS[key])}: measured {value:.2f}x (paper {PAPER[key]})")
    return "\n".join(lines + sweep_lines(r))


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{flag} takes comma-separated positive integers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise ConfigError(f"{flag} takes comma-separated positive integers, got {text!r}")
    return values


def run(args, overrides) -> str:
    if overrides:
        raise ConfigError("--config.* overrides do not apply to moe; use its flags (--d-model, --experts, ...)")
    shape = dict(d=args.d_model or DEFAULTS["d_model"], d_ff=args.d_ff or DEFAULTS["d_ff"], experts=args.experts,
                 top_k=args.top_k, chunk=args.chunk or DEFAULTS["chunk"], chunks=args.chunks, zipf=args.zipf,
                 group=args.group, kernels=args.kernels, overflow=args.overflow)
    if min(shape["d"], shape["d_ff"], shape["chunk"], shape["chunks"], shape["group"], args.repeats) <= 0:
        raise ConfigError("--d-model, --d-ff, --chunk, --chunks, --group and --repeats must be positive")
    if not 1 <= shape["top_k"] <= shape["experts"]:
        raise ConfigError(f"--top-k {shape['top_k']} must lie in [1, --experts {shape['experts']}]")
    if shape["zipf"] < 0:
        raise ConfigError(f"--zipf {shape['zipf']} must be >= 0")
    OVERFLOW_POLICIES.check(args.overflow, "--overflow")
    capacities, sweep_groups = _ints(args.capacities, "--capacities"), _ints(args.sweep_groups, "--sweep-groups")
    if capacities:
        shape.update(capacities=capacities, sweep_groups=sweep_groups)
    r = measure(shape["d"], shape["d_ff"], shape["experts"], shape["top_k"], shape["chunk"], shape["chunks"],
                shape["zipf"], shape["group"], args.repeats, kernels=shape["kernels"], overflow=args.overflow,
                capacities=capacities, sweep_groups=sweep_groups)
    report = format_report(shape, r, args.repeats)
    if args.json:
        write_json_atomic(args.json, {"shape": shape, "repeats": args.repeats,
                                      "device": jax.devices()[0].device_kind, **r})
        report += f"\n  wrote {args.json}"
    return report
