"""MeKi's generated doc blocks (``edge-jax docs``), written from the MeKi grids' records and committed files.

Kinds, each ``fn(src, *args, **options)`` (:mod:`edge_jax.docgen.sources`); CELL names are the grids' cell
names, shown with the paper's labels (:data:`LABELS`):

    meki.headline                          README's "The five papers" cell
    meki.results                           docs/meki.md's table: per grid the paper's ordering, ours, the verdicts
    meki.order GRID METRIC                 the cells' seed means, best first: "Engram 0.2958 > MeKi 0.2948 > ..."
    meki.range GRID METRIC                 the lowest and highest cell mean: "4.393-4.402"
    meki.test GRID A B METRIC [show=]      A − B paired over seeds; show= all (default), mean, ci, p, verdict,
                                           detectable, needed; seeds=N: the first N shared seeds only
    meki.seed GRID CELL SEED METRIC        one record's value
    meki.wins GRID A B METRIC              on how many shared seeds A's value is higher: "8 of 8"
    meki.width GRID METRIC                 the highest minus the lowest cell mean of GRID
    meki.seed_range GRID METRIC            the lowest and highest value over GRID's records
    meki.spread METRIC                     the highest minus the lowest cell mean over every MeKi grid
    meki.max METRIC / meki.max_std METRIC  the highest cell mean / cell std over every MeKi grid
    meki.pair_spread mean|detectable|needed  over the paper's pairs of T2-T4 on their ranking metric: the
                                           range of |mean Δ|, of the minimum detectable Δ, of the seeds needed
    meki.vs_dense GRID A B                 the table of A − B on the ranking metric, each task and val_loss
    meki.lens DIR CELL LAYER [direction=]  a LogitLens layer's KL, mean ± std over seeds (DIR under results/)
    meki.lens_table DIR A B                per layer: A's and B's KL both ways, B − A paired, its interval, p, verdict
    meki.lens_pairs DIR                    the LogitLens verdicts per layer: "disagree at layers 0-2, p ≤ 8.0e-06"
    meki.docs GRID TASK                    documents a built-in task scored (the records' accuracies' denominator)
    meki.reused GRID                       how many of GRID's records a sibling grid's run supplied (``reused_from``)
    meki.compile TOPOLOGY                  meki_main's paper-preset compile estimates on TOPOLOGY, as a sentence

Numbers print as the tables print them unless ``fmt=`` is given. The grids' table notes from the records
are :func:`edge_jax.papers.meki.notes.record_notes`.
"""
from __future__ import annotations

import csv
import statistics

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources, machine, number
from edge_jax.grid import verdicts
from edge_jax.grid.tables import format_p, per_seed
from edge_jax.papers.meki.notes import TASKS, docs_scored
from edge_jax.registry import DOC_BLOCKS

GRIDS = ("meki_main", "meki_vs_ple_engram", "meki_memory_type", "meki_position", "meki_fusion",
         "meki_projection", "meki_dmem_scaling")
PAPER_REF = {"meki_main": "T1", "meki_vs_ple_engram": "T2", "meki_memory_type": "T3", "meki_position": "T4",
             "meki_fusion": "Fig. 5", "meki_projection": "§5.6", "meki_dmem_scaling": "Fig. 6"}
LABELS = {"baseline": "base", "meki": "MeKi", "baseline_plus": "base⁺", "meki_plus": "MeKi⁺", "ple": "PLE",
          "engram": "Engram", "static_only": "static", "dynamic_only": "dynamic", "parallel_ffn": "∥FFN",
          "parallel_attn": "∥attn", "after_attn": "after attn", "after_ffn": "after FFN",
          "add_sigmoid": "add-sigmoid", "mul_sigmoid": "mul-sigmoid", "add_silu": "add-SiLU",
          "mul_silu": "mul-SiLU", "swiglu": "SwiGLU", "linear": "linear", "d_mem_32": "d_mem 32",
          "d_mem_64": "d_mem 64", "d_mem_96": "d_mem 96"}
GRID_LABELS = {("meki_memory_type", "meki"): "both"}
DECODE = "results/meki_decode/bench.json"  # edge-jax bench meki-decode --json ...


def label(grid: str, cell: str) -> str:
    return GRID_LABELS.get((grid, cell), LABELS.get(cell, cell))


def _lower(src: Sources, grid: str, metric: str) -> bool:
    t = src.table(grid)
    if metric == t.grid.metric:
        return t.grid.lower_is_better
    return "loss" in metric or "nll" in metric or "ppl" in metric


def means(src: Sources, grid: str, metric: str) -> dict[str, float]:
    t = src.table(grid)
    out = {r.cell: r.stats[metric].mean for r in t.rows if metric in r.stats and r.stats[metric].mean is not None}
    if not out:
        out = {c: statistics.fmean(v.values()) for c, v in per_seed(t.records, list(t.grid.cells), metric).items() if v}
    if not out:
        raise DocBlockError(f"no record of {grid} has the metric {metric!r}")
    return out


@DOC_BLOCKS.register("meki.order")
def order(src: Sources, grid: str, metric: str, fmt: str = "") -> str:
    m = means(src, grid, metric)
    ranked = sorted(m, key=m.get, reverse=not _lower(src, grid, metric))
    sign = " < " if _lower(src, grid, metric) else " > "
    return sign.join(f"{label(grid, c)} {number(m[c], fmt=fmt)}" for c in ranked)


@DOC_BLOCKS.register("meki.range")
def value_range(src: Sources, grid: str, metric: str, fmt: str = "") -> str:
    m = means(src, grid, metric).values()
    return f"{number(min(m), fmt=fmt)}-{number(max(m), fmt=fmt)}"


def pair_test(src: Sources, grid: str, a: str, b: str, metric: str, seeds: int = 0) -> verdicts.PairTest:
    """A − B over the seeds both have (the first ``seeds`` of them when > 0), unsigned (> 0: A's is larger)."""
    diffs = src.paired(grid, a, b, metric)[:seeds or None]
    if len(diffs) < 2:
        raise DocBlockError(f"grid {grid}: cells {a} and {b} share fewer than 2 seeds with {metric!r}")
    return verdicts.paired_t(diffs)


def _signed(x: float, fmt: str = "") -> str:
    text = number(x, fmt=fmt)
    return text.replace("-", "−") if x < 0 else "+" + text


def verdict_word(src: Sources, grid: str, a: str, b: str, metric: str, t: verdicts.PairTest) -> str:
    if t.verdict == "within noise":
        return "within noise"
    a_better = (t.mean < 0) == _lower(src, grid, metric)
    return f"{label(grid, a) if a_better else label(grid, b)} better"


@DOC_BLOCKS.register("meki.test")
def test(src: Sources, grid: str, a: str, b: str, metric: str, show: str = "all", fmt: str = "",
         seeds: str = "0") -> str:
    t = pair_test(src, grid, a, b, metric, int(seeds))
    parts = {"mean": _signed(t.mean, fmt), "ci": f"[{_signed(t.ci[0], fmt)}, {_signed(t.ci[1], fmt)}]",
             "p": format_p(t.p), "verdict": verdict_word(src, grid, a, b, metric, t),
             "detectable": number(t.min_detectable, fmt=fmt), "needed": t.needs_text}
    if show != "all":
        if show not in parts:
            raise DocBlockError(f"show={show} is not one of all, {', '.join(parts)}")
        return parts[show]
    text = f"{parts['mean']} {parts['ci']}, p {parts['p']}, {parts['verdict']}"
    if t.verdict == "within noise":
        text += f" (minimum detectable {parts['detectable']}, {parts['needed']} seeds needed)"
    return text


@DOC_BLOCKS.register("meki.vs_dense")
def vs_dense(src: Sources, grid: str, a: str, b: str) -> str:
    t = src.table(grid)
    n = pair_test(src, grid, a, b, t.grid.metric).n
    rows = [("`zero_shot_avg` (the ranking metric)", "zero_shot_avg")]
    rows += [(f"`zero_shot/{task}`" + (" (knowledge)" if task == "facts_mc" else ""), f"zero_shot/{task}")
             for task in TASKS]
    rows.append(("validation loss (nats, lower)", "val_loss"))
    lines = [f"| metric | mean Δ | interval | p | verdict | min. detectable ({n} seeds) | seeds needed |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for name, metric in rows:
        r = pair_test(src, grid, a, b, metric)
        lines.append(f"| {name} | {_signed(r.mean)} | [{_signed(r.ci[0])}, {_signed(r.ci[1])}] | {format_p(r.p)} | "
                     f"{verdict_word(src, grid, a, b, metric, r)} | {number(r.min_detectable)} | {r.needs_text} |")
    return "\n".join(lines)


@DOC_BLOCKS.register("meki.seed")
def seed_value(src: Sources, grid: str, cell: str, seed: str, metric: str, fmt: str = "") -> str:
    values = src.per_seed(grid, cell, metric)
    if int(seed) not in values:
        raise DocBlockError(f"grid {grid} has no record of {cell} seed {seed} with {metric!r}")
    return number(values[int(seed)], fmt=fmt)


@DOC_BLOCKS.register("meki.wins")
def wins(src: Sources, grid: str, a: str, b: str, metric: str) -> str:
    x, y = src.per_seed(grid, a, metric), src.per_seed(grid, b, metric)
    shared = sorted(set(x) & set(y))
    return f"{sum(x[s] > y[s] for s in shared)} of {len(shared)}"


@DOC_BLOCKS.register("meki.width")
def width(src: Sources, grid: str, metric: str, fmt: str = "") -> str:
    m = means(src, grid, metric).values()
    return number(max(m) - min(m), fmt=fmt)


@DOC_BLOCKS.register("meki.seed_range")
def seed_range(src: Sources, grid: str, metric: str, fmt: str = "") -> str:
    v = [r["metrics"][metric] for r in src.table(grid).records if isinstance(r.get("metrics", {}).get(metric), float)]
    if not v:
        raise DocBlockError(f"no record of {grid} has the metric {metric!r}")
    return f"{number(min(v), fmt=fmt)}-{number(max(v), fmt=fmt)}"


def _all_stats(src: Sources, metric: str) -> list:
    out = [r.stats[metric] for g in GRIDS for r in src.table(g).rows if metric in r.stats and r.stats[metric].n]
    if not out:
        raise DocBlockError(f"no MeKi grid has the metric {metric!r}")
    return out


@DOC_BLOCKS.register("meki.spread")
def spread(src: Sources, metric: str, fmt: str = "") -> str:
    m = [s.mean for s in _all_stats(src, metric)]
    return number(max(m) - min(m), fmt=fmt)


@DOC_BLOCKS.register("meki.max")
def max_mean(src: Sources, metric: str, fmt: str = "") -> str:
    return number(max(s.mean for s in _all_stats(src, metric)), fmt=fmt)


@DOC_BLOCKS.register("meki.max_std")
def max_std(src: Sources, metric: str, fmt: str = "") -> str:
    return number(max(s.std for s in _all_stats(src, metric) if s.std is not None), fmt=fmt)


@DOC_BLOCKS.register("meki.pair_spread")
def pair_spread(src: Sources, what: str) -> str:
    tests = [p.test for g in ("meki_vs_ple_engram", "meki_memory_type", "meki_position") for p in src.table(g).pairs]
    if what == "mean":
        m = [abs(t.mean) for t in tests]
        return f"{number(min(m), fmt='.3f')}-{number(max(m), fmt='.3f')}"
    if what == "detectable":
        m = [t.min_detectable for t in tests]
        return f"{number(min(m), fmt='.3f')}-{number(max(m), fmt='.3f')}"
    if what == "needed":
        noise = sorted((t for t in tests if t.verdict == "within noise"), key=lambda t: t.seeds_needed or 10**9)
        if not noise:
            return "no more"
        return f"{noise[0].needs_text} to {noise[-1].needs_text.replace('> 1000', 'more than 1,000')}"
    raise DocBlockError(f"meki.pair_spread takes mean, detectable or needed, not {what!r}")


def _paper_order(grid: str, ranks: dict[str, int]) -> str:
    by_rank: dict[int, list[str]] = {}
    for cell, rank in ranks.items():
        by_rank.setdefault(rank, []).append(label(grid, cell))
    groups = [by_rank[r] for r in sorted(by_rank)]
    if len(groups) == 2 and len(groups[0]) == 1 and len(groups[1]) > 1:
        return f"{groups[0][0]} best (others not ordered)"
    return " > ".join(" = ".join(g) for g in groups)


def _verdict_cell(src: Sources, grid: str) -> str:
    t = src.table(grid)
    c = verdicts.counts(t.pairs)
    text = f"{c['agree']} agree, {c['disagree']} disagree, {c['within noise']} within noise"
    decided = [f"{label(grid, p.better)} over {label(grid, p.worse)} Δ {number(p.test.mean)}, p {format_p(p.test.p)}"
               for p in t.pairs if p.test.verdict in ("agree", "disagree")]
    noise = [p.test for p in t.pairs if p.test.verdict == "within noise"]
    notes = decided
    if noise:
        lo, hi = min(x.min_detectable for x in noise), max(x.min_detectable for x in noise)
        needed = sorted((x.seeds_needed or 10**9) for x in noise)
        need = "; ".join(x.needs_text for x in sorted(noise, key=lambda x: x.seeds_needed or 10**9))
        notes = notes + [f"within noise: minimum detectable {number(lo)}-{number(hi)}, seeds needed {need}"
                         if len(noise) > 1 else f"within noise: minimum detectable {number(lo)}, "
                         f"{needed[0] if needed[0] < 10**9 else noise[0].needs_text} seeds needed"]
    return text + (f" ({'; '.join(notes)})" if notes else "")


@DOC_BLOCKS.register("meki.results")
def results(src: Sources) -> str:
    lines = ["| grid | paper ordering | ours (means over seeds) | verdict (paired t-test, α = 0.05) |",
             "|---|---|---|---|"]
    for grid in GRIDS:
        t = src.table(grid)
        seeds = min(r.stats[t.grid.metric].n for r in t.rows)
        ours = f"{seeds} seeds: `{t.grid.metric}` {order(src, grid, t.grid.metric)}"
        if t.grid.metric != "val_loss":
            ours += f"; `val_loss` {order(src, grid, 'val_loss')}"
        lines.append(f"| [`{grid}`](../results/{grid}/table.md) ({PAPER_REF[grid]}) | "
                     f"{_paper_order(grid, t.grid.paper.ranks())} | {ours} | {_verdict_cell(src, grid)} |")
    return "\n".join(lines)


def _lens_rows(src: Sources, rel: str) -> list[dict]:
    with open(src.path(rel), newline="") as f:
        return list(csv.DictReader(f))


@DOC_BLOCKS.register("meki.lens")
def lens(src: Sources, rel: str, cell: str, layer: str, direction: str = "early||final", fmt: str = "") -> str:
    for row in _lens_rows(src, f"results/{rel}/logit_lens.csv"):
        if row["cell"] == cell and row["layer"] == layer and row["direction"] == direction:
            mean, std = float(row["mean"]), float(row["std"])
            return f"{number(mean, fmt=fmt)} ± {number(std, fmt=fmt)}" if int(row["n_seeds"]) > 1 else number(mean)
    raise DocBlockError(f"results/{rel}/logit_lens.csv has no row {cell} {direction} layer {layer}")


@DOC_BLOCKS.register("meki.lens_ratio")
def lens_ratio(src: Sources, rel: str, a: str, b: str, layer: str, fmt: str = ".1f") -> str:
    """A's mean KL over B's at ``layer`` (early ‖ final)."""
    value = {c: float(r["mean"]) for c in (a, b) for r in _lens_rows(src, f"results/{rel}/logit_lens.csv")
             if r["cell"] == c and r["layer"] == layer and r["direction"] == "early||final"}
    if len(value) < 2 or not value[b]:
        raise DocBlockError(f"results/{rel}/logit_lens.csv has no nonzero layer {layer} of {a} and {b}")
    return number(value[a] / value[b], fmt=fmt)


@DOC_BLOCKS.register("meki.lens_table")
def lens_table(src: Sources, rel: str, better: str, worse: str) -> str:
    tests = {r["layer"]: r for r in _lens_rows(src, f"results/{rel}/logit_lens_pairs.csv")
             if r["better"] == better and r["worse"] == worse and r["direction"] == "early||final"}
    if not tests:
        raise DocBlockError(f"results/{rel}/logit_lens_pairs.csv has no test of {better} against {worse}")
    lines = [f"| layer | {label('', worse)} | {label('', better)} | paired d = KL({label('', worse)}) − "
             f"KL({label('', better)}), 95% interval | p | verdict |", "|---:|---:|---:|---:|---:|---|"]
    for layer, t in sorted(tests.items(), key=lambda kv: int(kv[0])):
        kl = {c: f"{lens(src, rel, c, layer, fmt='.3f')} / {lens(src, rel, c, layer, 'final||early', '.3f')}"
              for c in (worse, better)}
        lines.append(f"| {layer} | {kl[worse]} | {kl[better]} | {_signed(float(t['mean_diff']), '.3f')} "
                     f"[{_signed(float(t['ci_low']), '.3f')}, {_signed(float(t['ci_high']), '.3f')}] | "
                     f"{format_p(float(t['p']))} | {t['verdict']} |")
    return "\n".join(lines)


@DOC_BLOCKS.register("meki.lens_pairs")
def lens_pairs(src: Sources, rel: str) -> str:
    rows = _lens_rows(src, f"results/{rel}/logit_lens_pairs.csv")
    if not rows:
        raise DocBlockError(f"results/{rel}/logit_lens_pairs.csv holds no test")
    by_verdict: dict[str, list[int]] = {}
    for row in rows:
        by_verdict.setdefault(row["verdict"], []).append(int(row["layer"]))
    parts = [f"{v} at layer{'s' if len(set(ls)) > 1 else ''} {min(ls)}-{max(ls)}" if len(set(ls)) > 1
             else f"{v} at layer {ls[0]}" for v, ls in by_verdict.items()]
    seeds = sorted({int(r["n"]) for r in rows})
    return (f"{', '.join(parts)} in both directions, {'/'.join(map(str, seeds))} seeds, "
            f"p ≤ {format_p(max(float(r['p']) for r in rows))}")


@DOC_BLOCKS.register("meki.docs")
def docs(src: Sources, grid: str, task: str) -> str:
    t = src.table(grid)
    values = [r["metrics"][f"zero_shot/{task}"] for r in t.records if f"zero_shot/{task}" in r.get("metrics", {})]
    n = docs_scored(values)
    if not values or n is None:
        raise DocBlockError(f"no record of {grid} has zero_shot/{task}")
    return f"{n:,}"


@DOC_BLOCKS.register("meki.reused")
def reused(src: Sources, grid: str) -> str:
    return str(sum(1 for r in src.table(grid).records if r.get("reused_from")))


def _seconds(text: str) -> float:
    value, unit = text.replace(",", "").split()[:2]
    return float(value) * {"ms": 1e-3, "s": 1.0, "h": 3600.0, "d": 86400.0}[unit]


@DOC_BLOCKS.register("meki.compile")
def compile_estimate(src: Sources, topology: str) -> str:
    rel = "results/meki_main/paper_compile.json"
    rows = src.json(rel).get(topology, {}).get("rows")
    if not rows:
        raise DocBlockError(f"{rel} has no rows for {topology}; see docs/compile.md for the command")
    try:
        steps = [_seconds(r["est. step"]) for r in rows.values()]
        budget = {c: _seconds(r["est. time for budget"]) for c, r in rows.items()}
    except (KeyError, ValueError) as e:
        raise DocBlockError(f"{rel}: cannot read the estimates of {topology} ({e})") from None
    fits = sum(r.get("fits") == "yes" for r in rows.values())
    small = [budget[c] / 3600 for c in budget if not c.endswith("_4b")]
    big = [budget[c] / 86400 for c in budget if c.endswith("_4b")]
    table_days = sum(budget[c] for c in ("baseline", "meki", "baseline_plus", "meki_plus") if c in budget) / 86400
    text = (f"{fits} of the {len(rows)} `meki_main` cells fit on a {topology} at an estimated "
            f"{min(steps):.2f}-{max(steps):.2f} s a step, {min(small):.0f}-{max(small):.0f} hours a cell at 0.6B "
            f"and 1.7B")
    if big:
        text += f" and about {max(big):.1f} days at 4B"
    return text + (f" by the roofline (real steps are slower), so one seed of the four-cell table is about "
                   f"{table_days:.1f} {topology} days and 8 seeds about {8 * table_days:.0f}")


def _json(src: Sources, key: str):
    return src.value(DECODE, key.split("."))


@DOC_BLOCKS.register("meki.headline")
def headline(src: Sources) -> str:
    g = "meki_main"
    loss = pair_test(src, g, "meki", "baseline", "val_loss")
    facts = pair_test(src, g, "meki", "baseline", "zero_shot/facts_mc")
    avg, avg_plus = (pair_test(src, g, a, b, "zero_shot_avg") for a, b in (("meki", "baseline"),
                                                                         ("meki_plus", "baseline_plus")))
    m = means(src, g, "val_loss")
    noise = "within noise" if avg.verdict == avg_plus.verdict == "within noise" else (
        f"{avg.verdict} / {avg_plus.verdict}")
    folded = _json(src, "result.ratio.folded")
    lo, hi = _json(src, "result.round_ratio_p25_p75.folded")
    return (f"MeKi lowers validation loss by {number(-loss.mean, fmt='.2f')} nats ({number(m['meki'])} vs "
            f"{number(m['baseline'])} dense, {loss.n} seeds) and knows more (facts_mc {_signed(facts.mean, '.3f')}, "
            f"p {format_p(facts.p)}), but its zero-shot average is {noise} at {avg.n} seeds, at both widths "
            f"(about {avg.needs_text} and {avg_plus.needs_text} needed); it also beats a 1.5× wider dense model in "
            f"validation loss ({number(m['meki'])} vs {number(m['baseline_plus'])}); folded decoding runs at "
            f"{folded:.2f}× the baseline's speed ({machine(src, DECODE)}; per-round ratios {lo:.2f}-{hi:.2f}, p25-p75; "
            f"paper 0.99)")
