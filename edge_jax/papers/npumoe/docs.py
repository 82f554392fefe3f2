"""NPUMoE's generated-block kinds (:data:`edge_jax.registry.DOC_BLOCKS`, ``edge-jax docs``): the numbers of
docs/npumoe.md and of README's NPUMoE row that need more than one cell's mean.

    npumoe.speedup GRID FAST SLOW [METRIC]      mean of SLOW / mean of FAST (default ``moe/ms_per_token``)
    npumoe.means GRID METRIC CELL ...           the cells' means joined by `` / ``
    npumoe.span GRID METRIC [CELL ...]          ``low-high`` of the cells' means (all cells without CELL)
    npumoe.spread GRID [METRIC]                 ``low-high`` over cells of std / mean, in percent
    npumoe.verdicts GRID [HI LO]                ``5 agree / 0 disagree / 1 within noise`` over the paper's pairs
                                                (with HI LO: only the pairs of capacity HI above capacity LO)
    npumoe.lean GRID HI LO                      ``8 of 9``: those pairs whose mean Δ goes the paper's way
    npumoe.tau GRID                             Kendall τ of the seed means against the paper's order
    npumoe.slower GRID A B [METRIC]             the seeds on which A's metric is above B's (``0 and 2``)
    npumoe.overlap KEY                          a calibration's Overlap@K (``heldout_overlap@4_mean``), mean
                                                over results/npumoe_calibration/seed*/, in percent
    npumoe.imbalance                            ``low-high`` of the calibrations' per-layer imbalance
    npumoe.fig17                                Fig. 17's table: ms/token, padding, drop, calls, loss change
    npumoe.sweep PATH                           the Table 5 sweep of ``bench moe --capacities`` as a table
    npumoe.sweep_ratio PATH OVERFLOW            ``g1 0.82×, g8 0.52×``: each group's latency at the smallest
                                                capacity over the largest, under one overflow policy
    npumoe.headline                             README's headline cell for NPUMoE

Every kind takes ``fmt=`` (a Python format) where it prints numbers; without it numbers print as the tables
print them.
"""
from __future__ import annotations

import statistics

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources, machine, number
from edge_jax.registry import DOC_BLOCKS

MS = "moe/ms_per_token"
CALIBRATION = "results/npumoe_calibration"
BENCH = "results/npumoe_bench/bench.json"


def _mean(src: Sources, grid: str, cell: str, metric: str) -> float:
    return statistics.fmean(src.per_seed(grid, cell, metric).values())


def _pm(values, fmt: str = ".2f") -> str:
    values = list(values)
    return f"{number(statistics.fmean(values), fmt=fmt)} ± {number(statistics.stdev(values), fmt=fmt)}"


def _span(values, fmt: str) -> str:
    return f"{number(min(values), fmt=fmt)}-{number(max(values), fmt=fmt)}"


@DOC_BLOCKS.register("npumoe.speedup")
def speedup(src: Sources, grid: str, fast: str, slow: str, metric: str = MS, fmt: str = ".2f") -> str:
    return number(_mean(src, grid, slow, metric) / _mean(src, grid, fast, metric), fmt=fmt)


@DOC_BLOCKS.register("npumoe.means")
def means(src: Sources, grid: str, metric: str, *cells: str, scale: str = "1", fmt: str = "") -> str:
    if not cells:
        raise DocBlockError("npumoe.means needs at least one cell after the metric")
    return " / ".join(number(_mean(src, grid, c, metric), scale, fmt) for c in cells)


@DOC_BLOCKS.register("npumoe.span")
def span(src: Sources, grid: str, metric: str, *cells: str, fmt: str = "") -> str:
    return _span([_mean(src, grid, c, metric) for c in cells or src.table(grid).grid.cells], fmt)


@DOC_BLOCKS.register("npumoe.spread")
def spread(src: Sources, grid: str, metric: str = MS, fmt: str = ".0f") -> str:
    cvs = []
    for c in src.table(grid).grid.cells:
        values = list(src.per_seed(grid, c, metric).values())
        if len(values) > 1:
            cvs.append(100 * statistics.stdev(values) / statistics.fmean(values))
    if not cvs:
        raise DocBlockError(f"grid {grid} has no cell with two seeds of {metric!r}")
    return _span(cvs, fmt)


def _pairs(src: Sources, grid: str, hi: str = "", lo: str = "") -> list:
    pairs = src.table(grid).pairs
    if hi or lo:
        from edge_jax.papers.npumoe.grid import capacity
        pairs = [p for p in pairs if str(capacity(p.better)) == hi and str(capacity(p.worse)) == lo]
    if not pairs:
        raise DocBlockError(f"grid {grid} has no pair the paper orders"
                            + (f" from capacity {hi} to {lo}" if hi else ""))
    return pairs


@DOC_BLOCKS.register("npumoe.verdicts")
def verdict_counts(src: Sources, grid: str, hi: str = "", lo: str = "") -> str:
    verdicts = [p.test.verdict.split(":")[0] for p in _pairs(src, grid, hi, lo)]
    return " / ".join(f"{verdicts.count(v)} {v}" for v in ("agree", "disagree", "within noise"))


@DOC_BLOCKS.register("npumoe.lean")
def lean(src: Sources, grid: str, hi: str, lo: str) -> str:
    pairs = _pairs(src, grid, hi, lo)
    return f"{sum(p.test.mean is not None and p.test.mean > 0 for p in pairs)} of {len(pairs)}"


@DOC_BLOCKS.register("npumoe.tau")
def tau(src: Sources, grid: str, fmt: str = ".2f") -> str:
    value = src.table(grid).agreement.tau
    if value is None:
        raise DocBlockError(f"grid {grid} has no Kendall tau (fewer than two cells the paper ranks)")
    return number(value, fmt=fmt)


@DOC_BLOCKS.register("npumoe.slower")
def slower(src: Sources, grid: str, a: str, b: str, metric: str = MS) -> str:
    x, y = src.per_seed(grid, a, metric), src.per_seed(grid, b, metric)
    seeds = [str(s) for s in sorted(set(x) & set(y)) if x[s] > y[s]]
    if not seeds:
        return "none"
    return seeds[0] if len(seeds) == 1 else f"{', '.join(seeds[:-1])} and {seeds[-1]}"


def _calibrations(src: Sources) -> list[dict]:
    seeds = sorted(p.parent.name for p in (src.root / CALIBRATION).glob("seed*/calibration.json"))
    if not seeds:
        raise DocBlockError(f"no {CALIBRATION}/seed*/calibration.json; run edge-jax moe calibrate --out there")
    return [src.json(f"{CALIBRATION}/{s}/calibration.json") for s in seeds]


@DOC_BLOCKS.register("npumoe.overlap")
def overlap(src: Sources, key: str, fmt: str = ".1f") -> str:
    values = [c.get("overlap", {}).get(key) for c in _calibrations(src)]
    if any(not isinstance(v, (int, float)) for v in values):
        raise DocBlockError(f"a calibration under {CALIBRATION} has no overlap {key!r}")
    return number(100 * statistics.fmean(values), fmt=fmt)


@DOC_BLOCKS.register("npumoe.imbalance")
def imbalance(src: Sources, fmt: str = ".1f") -> str:
    return _span([layer["imbalance"] for c in _calibrations(src) for layer in c["per_layer"]], fmt)


def _ms(row: dict) -> str:
    return f"{row['ms_per_token']:.4f} [{row['ms_p25']:.4f}-{row['ms_p75']:.4f}]"


@DOC_BLOCKS.register("npumoe.sweep")
def sweep(src: Sources, path: str) -> str:
    cells = _sweep(src, path)
    lines = ["| cell | overflow dropped: drop | ms/token median [25th-75th] | overflow on the host: fallback | "
             "ms/token median [25th-75th] |", "|---|---|---|---|---|"]
    for name, row in cells["drop"].items():
        fb = cells["fallback"][name]
        label = name[1:].replace("_c", "×")
        lines.append(f"| {label} | {row['drop']:.0%} | {_ms(row)} | {fb['fallback']:.0%} | {_ms(fb)} |")
    return "\n".join(lines)


FIG17 = {"base": "base", "tiers": "+tiers", "tiers_grouping": "+grouping", "all": "+residency (all)"}


@DOC_BLOCKS.register("npumoe.fig17")
def fig17(src: Sources, grid: str = "npumoe_ablation") -> str:
    lines = ["| Step | ms/token | Padding | Drop | Calls/chunk | Loss change |", "|---|---|---|---|---|---|"]
    for cell, name in FIG17.items():
        ms = _pm(src.per_seed(grid, cell, MS).values(), ".4f")
        pad, drop, calls, loss = (_mean(src, grid, cell, f"moe/{m}") for m in
                                  ("padding_pct", "drop_pct", "calls_per_layer", "val_loss_change_pct"))
        lines.append(f"| {name} | {ms} | {pad:.1f}% | {drop:.1f}% | {calls:.3g} | {loss:+.2f}% |")
    return "\n".join(lines)


def _sweep(src: Sources, path: str) -> dict:
    cells = src.json(path).get("result", {}).get("sweep") or {}
    if not cells.get("drop") or not cells.get("fallback"):
        raise DocBlockError(f"{path} has no Table 5 sweep; run edge-jax bench moe --capacities 32,64,128 --json {path}")
    return cells


@DOC_BLOCKS.register("npumoe.sweep_ratio")
def sweep_ratio(src: Sources, path: str, overflow: str, fmt: str = ".2f") -> str:
    from edge_jax.papers.npumoe.grid import capacity, group
    cells = _sweep(src, path).get(overflow)
    if not cells:
        raise DocBlockError(f"{path} has no sweep under overflow {overflow!r}; it has drop and fallback")
    caps = sorted({capacity(n) for n in cells})

    def ratio(g):  # group g's time per token at the lowest capacity over that at the highest
        return cells[f"g{g}_c{caps[0]}"]["ms_per_token"] / cells[f"g{g}_c{caps[-1]}"]["ms_per_token"]

    return ", ".join(f"g{g} {number(ratio(g), fmt=fmt)}×" for g in sorted({group(n) for n in cells}))


@DOC_BLOCKS.register("npumoe.headline")
def headline(src: Sources) -> str:
    """README's NPUMoE cell: the benchmark's all-vs-base speed-up, the grid's, its verdicts, Overlap@4 and
    the accuracy cost of the capacity-128 drops."""
    bench = src.json(BENCH).get("result", {}).get("speedup_vs_base", {}).get("+residency")
    if not isinstance(bench, (int, float)):
        raise DocBlockError(f"{BENCH} has no result.speedup_vs_base; rerun edge-jax bench moe --json {BENCH}")
    grid = "npumoe_ablation"
    pairs = [p.test.verdict.split(":")[0] for p in _pairs(src, grid)]
    agree, noise = pairs.count("agree"), pairs.count("within noise")
    other = len(pairs) - agree - noise
    order = f"{agree} of the {len(pairs)} Fig. 17 pairs in the paper's order" + (
        f", {noise} within noise" if noise else "") + (f", {other} against it" if other else "")
    drop = src.per_seed("npumoe_accuracy", "c128_saliency", "moe/drop_pct").values()
    acc = [-v for v in src.per_seed("npumoe_accuracy", "c128_saliency", "moe/accuracy_change").values()]
    return (f"all of Fig. 17's steps {bench:.2f}× faster than Ours-base in `bench moe` "
            f"({machine(src, 'results/npumoe_bench/bench.json')}; paper 2.89×; "
            f"{speedup(src, grid, 'all', 'base')}× in the tiny model's grid, "
            f"{len(src.per_seed(grid, 'all', MS))} seeds each timed alone, {order}); "
            f"Overlap@4 {overlap(src, 'heldout_overlap@4_mean')}% (paper 86%); dropping "
            f"{_pm(drop)}% of token copies (capacity 128, {len(acc)} seeds) costs {_pm(acc)} accuracy points "
            f"(paper: under 1.1%)")
