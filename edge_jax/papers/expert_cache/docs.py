"""The expert cache's generated doc blocks (``edge-jax docs``) and its tables' notes from the records.

Cells of ``cache_policies`` are ``<trace>-v<VRAM %>-<policy>``; a cell elsewhere is named ``grid/cell``.
Kinds, each ``fn(src, *args, **options)`` (:mod:`edge_jax.docgen.sources`):

    expert_cache.headline                      README's "The five papers" cell
    expert_cache.stall_table TRACE             stall per VRAM and policy (the lowest online policy in bold)
    expert_cache.ratio A B [METRIC]            per-seed A / B of ``grid/cell`` names: "0.74 ± 0.01" (std=no: mean)
    expert_cache.ratio_range TRACE A B VRAMS   the range over VRAM (comma-separated %) of the mean per-seed A / B
    expert_cache.gap_closed TRACE VRAM         the share of LRU's stall above Belady's the watermark policy removes
    expert_cache.diff_ci A B [METRIC]          "0.22 (95% CI 0.08-0.35, p 0.020)": mean paired A - B
    expert_cache.max_p TRACE A B VRAMS         the largest paired-test p of A - B over those VRAMs
    expert_cache.median GRID METRIC            the median of METRIC over every record of the grid
    expert_cache.total_minutes GRID            the records' run times added up, in minutes

:func:`record_notes` is both grids' ``record_notes`` hook.
"""
from __future__ import annotations

import statistics

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources, number
from edge_jax.grid import verdicts
from edge_jax.grid.tables import format_p
from edge_jax.registry import DOC_BLOCKS

POLICIES_GRID = "cache_policies"
METRIC = "stall_ms_per_token"
ONLINE = ("fifo", "lru", "lfu", "ewma", "scoutgate", "watermark", "watermark_pop")
HEAD = {"fifo": "FIFO", "lru": "LRU", "lfu": "LFU", "ewma": "EWMA-only", "scoutgate": "ScoutGate-only",
        "watermark": "watermark", "watermark_pop": "watermark_pop (ours)", "belady": "Belady"}
VRAMS = (10, 20, 30, 40, 50)


def _cell(name: str) -> tuple[str, str]:
    grid, sep, cell = name.rpartition("/")
    return (grid, cell) if sep else (POLICIES_GRID, name)


def _seeds(src: Sources, name: str, metric: str = METRIC) -> dict[int, float]:
    return src.per_seed(*_cell(name), metric)


def per_seed_ratios(src: Sources, a: str, b: str, metric: str = METRIC) -> list[float]:
    x, y = _seeds(src, a, metric), _seeds(src, b, metric)
    shared = sorted(set(x) & set(y))
    if not shared:
        raise DocBlockError(f"{a} and {b} share no seed with {metric!r}")
    return [x[s] / y[s] for s in shared]


@DOC_BLOCKS.register("expert_cache.ratio")
def ratio(src: Sources, a: str, b: str, metric: str = METRIC, fmt: str = ".2f", std: str = "yes") -> str:
    r = per_seed_ratios(src, a, b, metric)
    text = number(statistics.fmean(r), fmt=fmt)
    return f"{text} ± {number(statistics.stdev(r), fmt=fmt)}" if std == "yes" and len(r) > 1 else text


def _vrams(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


@DOC_BLOCKS.register("expert_cache.ratio_range")
def ratio_range(src: Sources, trace: str, a: str, b: str, vrams: str, fmt: str = ".2f") -> str:
    means = [statistics.fmean(per_seed_ratios(src, f"{trace}-v{v}-{a}", f"{trace}-v{v}-{b}")) for v in _vrams(vrams)]
    return f"{number(min(means), fmt=fmt)}-{number(max(means), fmt=fmt)}"


@DOC_BLOCKS.register("expert_cache.gap_closed")
def gap_closed(src: Sources, trace: str, vram: str, fmt: str = ".0f") -> str:
    """Mean over seeds of (LRU − watermark) / (LRU − Belady), in percent."""
    lru, wm, bel = (_seeds(src, f"{trace}-v{vram}-{p}") for p in ("lru", "watermark", "belady"))
    shares = [100 * (lru[s] - wm[s]) / (lru[s] - bel[s]) for s in sorted(set(lru) & set(wm) & set(bel))]
    return number(statistics.fmean(shares), fmt=fmt)


def _paired(src: Sources, a: str, b: str, metric: str = METRIC) -> verdicts.PairTest:
    (grid, cell_a), (other, cell_b) = _cell(a), _cell(b)
    if other != grid:
        raise DocBlockError(f"{a} and {b} are cells of different grids; a paired test needs one grid")
    return verdicts.paired_t(src.paired(grid, cell_a, cell_b, metric))


@DOC_BLOCKS.register("expert_cache.diff_ci")
def diff_ci(src: Sources, a: str, b: str, metric: str = METRIC, fmt: str = ".2f") -> str:
    t = _paired(src, a, b, metric)
    if t.ci is None:
        raise DocBlockError(f"{a} and {b} share fewer than 2 seeds with {metric!r}")
    return (f"{number(t.mean, fmt=fmt)} (95% CI {number(t.ci[0], fmt=fmt)} to {number(t.ci[1], fmt=fmt)}, "
            f"p {format_p(t.p)})")


@DOC_BLOCKS.register("expert_cache.max_p")
def max_p(src: Sources, trace: str, a: str, b: str, vrams: str) -> str:
    return format_p(max(_paired(src, f"{trace}-v{v}-{a}", f"{trace}-v{v}-{b}").p for v in _vrams(vrams)))


@DOC_BLOCKS.register("expert_cache.median")
def median(src: Sources, grid: str, metric: str, scale: str = "1", fmt: str = "") -> str:
    values = [r["metrics"][metric] for r in src.table(grid).records if metric in r.get("metrics", {})]
    if not values:
        raise DocBlockError(f"no record of {grid} has the metric {metric!r}")
    return number(statistics.median(values), scale, fmt)


@DOC_BLOCKS.register("expert_cache.total_minutes")
def total_minutes(src: Sources, grid: str, fmt: str = ".0f") -> str:
    """The run time of every record of the grid added up (``wall_time_s``), in minutes."""
    return number(sum(r.get("wall_time_s") or 0.0 for r in src.table(grid).records) / 60, fmt=fmt)


@DOC_BLOCKS.register("expert_cache.stall_table")
def stall_table(src: Sources, trace: str) -> str:
    """Stall in ms/token, mean over seeds, one row per VRAM fraction; the lowest online policy in bold."""
    policies = (*ONLINE, "belady")
    lines = ["| VRAM | " + " | ".join(HEAD[p] for p in policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for v in VRAMS:
        means = {p: statistics.fmean(_seeds(src, f"{trace}-v{v}-{p}").values()) for p in policies}
        best = min(ONLINE, key=means.get)
        cells = [f"**{means[p]:.2f}**" if p == best else f"{means[p]:.2f}" for p in policies]
        lines.append(f"| {v}% | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _goal(src: Sources, policy: str, against: str, vram: int) -> float:
    return statistics.fmean(per_seed_ratios(src, f"real-v{vram}-{policy}", f"real-v{vram}-{against}"))


@DOC_BLOCKS.register("expert_cache.headline")
def headline(src: Sources) -> str:
    t = src.table(POLICIES_GRID)
    seeds = min(r.stats[METRIC].n for r in t.rows)
    tokens = {r["metrics"]["tokens"] + r["metrics"].get("train_tokens", 0) for r in t.records
              if "tokens" in r.get("metrics", {})}
    size = f"{max(tokens) / 2 ** 20:.0f} M-token" if tokens else "real"
    lru = [_goal(src, "watermark", "lru", v) for v in (20, 30)]
    bel = [_goal(src, "watermark", "belady", v) for v in (20, 30)]
    pop = [_goal(src, "watermark_pop", "belady", v) for v in (20, 30)]
    p_pop = max(_paired(src, f"real-v{v}-watermark", f"real-v{v}-watermark_pop").p for v in (20, 30))
    mark = lambda ok: "pass" if ok else "fail"  # noqa: E731
    return (f"first published numbers ({seeds} seeds, {size} traces): stall {lru[0]:.2f}× LRU's at 20% VRAM "
            f"and "
            f"{lru[1]:.2f}× at 30% (our goal ≤ 0.8×, {mark(max(lru) <= 0.8)}), {bel[0]:.2f}× and {bel[1]:.2f}× the "
            f"Belady bound (our goal ≤ 1.3×, {mark(max(bel) <= 1.3)}); `watermark_pop` {pop[0]:.2f}× and "
            f"{pop[1]:.2f}× ({'lower than the paper' if p_pop < 0.05 else 'not significantly below the paper'}'s "
            f"policy, p ≤ {format_p(p_pop)})")


def record_notes(grid, records: list[dict]) -> str:
    """What the records simulated: tokens and accesses per cell, ScoutGate's training tokens, the RAM
    fraction, the expert size and costs, and whether the sizes were one (Belady exact) or spread."""
    done = [r for r in records if "tokens" in r.get("metrics", {})]
    if not done:
        return ""

    def seen(key: str, fmt: str = ",.0f") -> str:
        values = sorted({r["metrics"][key] for r in done if key in r["metrics"]})
        if len(values) > 2:
            return f"{format(values[0], fmt)} to {format(values[-1], fmt)}"
        return " or ".join(format(v, fmt) for v in values) if values else "—"

    def config(section: str, key: str) -> str:
        return " or ".join(sorted({str(r["config"][section][key]) for r in done}))

    spread = config("profile", "size_spread")
    sizes = ("one expert size (size_spread 0: Belady is the exact demand-fetch optimum)" if spread in ("0", "0.0")
             else f"expert sizes spread by {spread} (Belady a heuristic)")
    return (f"Each cell simulated {seen('tokens')} tokens ({seen('accesses')} accesses) from a cold cache; "
            f"ScoutGate trained on {seen('train_tokens')} tokens; RAM fraction {config('cache', 'ram_fraction')}; "
            f"experts of {seen('expert_mb', ',.1f')} MB, C^G {seen('cost_g_ms', '.2f')} ms, C^R "
            f"{seen('cost_r_ms', '.2f')} ms, compute per layer {seen('profile_compute_ms', 'g')} ms; {sizes}.")
