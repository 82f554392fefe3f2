"""table.md and table.csv for a grid, built only from its records.

Per cell: seeds recorded, metric mean ± std (sample std over seeds), the extra
metrics likewise, the paper's value, and our rank beside the paper's. Ranks are
taken over the cells that have both a paper rank and a result of ours, so the two
rank columns are comparable. Every pair of cells the paper orders gets a verdict from
the paired test over seeds (:mod:`edge_jax.grid.verdicts`): agree, disagree or within
noise; the headline counts them, with Kendall's tau-b between the rankings of the means
beside. pairs.csv holds the per-pair numbers.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
from pathlib import Path

from edge_jax.grid import power, spec, verdicts
from edge_jax.grid.spec import Grid
from edge_jax.utils import storage
from edge_jax.utils.atomic import write_text_atomic


@dataclasses.dataclass
class Stat:
    n: int
    mean: float | None
    std: float | None        # sample std (ddof=1); None with fewer than 2 values


@dataclasses.dataclass
class Row:
    cell: str
    seeds: list[int]
    stats: dict[str, Stat]   # metric name -> Stat, primary metric first
    paper_value: float | None
    paper_rank: int | None
    our_rank: int | None
    missing_seeds: list[int]


@dataclasses.dataclass
class Agreement:
    cells: list[str]         # cells compared, paper order
    agrees: bool | None      # None when fewer than 2 cells can be compared
    tau: float | None        # Kendall tau-b; None when undefined
    discordant: int          # pairs the paper orders that we order otherwise
    ordered_pairs: int       # pairs the paper orders strictly


@dataclasses.dataclass
class Table:
    grid: Grid
    rows: list[Row]
    agreement: Agreement
    records: list[dict]
    ignored: int
    pairs: list[verdicts.Pair] = dataclasses.field(default_factory=list)
    changed: str = ""   # settings the records were made with that differ from today's (edge_jax.grid.drift)


def stat(values: list[float]) -> Stat:
    n = len(values)
    if n == 0:
        return Stat(0, None, None)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Stat(n, mean, std)


def competition_ranks(scores: dict[str, float], lower_is_better: bool) -> dict[str, int]:
    """1 = best; equal scores share the better rank; NaN ranks last."""
    def key(cell):
        v = scores[cell]
        if math.isnan(v):
            return (1, 0.0)
        return (0, v if lower_is_better else -v)
    ordered = sorted(scores, key=key)
    ranks: dict[str, int] = {}
    for i, cell in enumerate(ordered):
        if i and key(ordered[i - 1]) == key(cell):
            ranks[cell] = ranks[ordered[i - 1]]
        else:
            ranks[cell] = i + 1
    return ranks


def kendall_tau_b(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-b (handles ties); None when a ranking is all ties."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else None


def ordering_agreement(ours: dict[str, int], paper: dict[str, int]) -> Agreement:
    """Compare two rankings (1 = best) over the cells both rank."""
    cells = sorted((c for c in paper if c in ours), key=lambda c: paper[c])
    if len(cells) < 2:
        return Agreement(cells, None, None, 0, 0)
    discordant = ordered = 0
    for i, a in enumerate(cells):
        for b in cells[i + 1:]:
            if paper[a] == paper[b]:
                continue
            ordered += 1
            if (ours[a] < ours[b]) != (paper[a] < paper[b]) or ours[a] == ours[b]:
                discordant += 1
    tau = kendall_tau_b([ours[c] for c in cells], [paper[c] for c in cells])
    agrees = None if ordered == 0 else discordant == 0
    return Agreement(cells, agrees, tau, discordant, ordered)


def build_table(grid: Grid, records: list[dict], seeds: int | None = None) -> Table:
    """Summarize the records of this grid and preset; `seeds` (0..seeds-1) sets
    which cell x seed records count as missing."""
    mine = [r for r in records if r.get("grid") == grid.name
            and r.get("preset") == grid.preset and r.get("cell") in grid.cells]
    by_cell: dict[str, list[dict]] = {cell: [] for cell in grid.cells}
    for rec in sorted(mine, key=lambda r: r["seed"]):
        by_cell[rec["cell"]].append(rec)

    metric_names = (grid.metric, *grid.extra_metrics)
    stats = {cell: {m: stat([float(r["metrics"][m]) for r in recs
                             if _is_number(r.get("metrics", {}).get(m))])
                    for m in metric_names}
             for cell, recs in by_cell.items()}

    paper_all = grid.paper.ranks()
    measured = {c: stats[c][grid.metric].mean for c in grid.cells
                if stats[c][grid.metric].n > 0}
    common = [c for c in grid.cells if c in paper_all and c in measured]
    ours = competition_ranks({c: measured[c] for c in common}, grid.lower_is_better)
    paper = competition_ranks({c: float(paper_all[c]) for c in common}, True)
    agreement = ordering_agreement(ours, paper)
    pairs = verdicts.judge(per_seed(mine, list(grid.cells), grid.metric), paper, grid.lower_is_better,
                           grid.explanations)

    planned = range(seeds) if seeds else ()
    rows = []
    for cell, recs in by_cell.items():
        have = [r["seed"] for r in recs]
        rows.append(Row(cell=cell, seeds=have, stats=stats[cell],
                        paper_value=grid.paper.values.get(cell),
                        paper_rank=paper.get(cell), our_rank=ours.get(cell),
                        missing_seeds=[s for s in planned if s not in have]))
    return Table(grid, rows, agreement, mine, ignored=len(records) - len(mine), pairs=pairs)


def write_tables(grid: Grid, records: list[dict], out: str | Path,
                 seeds: int | None = None, changed: str = "") -> Table:
    """Write OUT/table.md, OUT/table.csv and OUT/pairs.csv atomically; returns the table. ``changed``:
    the paragraph naming settings that differ from today's (:func:`edge_jax.grid.drift.changed_line`)."""
    table = dataclasses.replace(build_table(grid, records, seeds), changed=changed)
    write_text_atomic(storage.path(out) / "table.md", markdown(table))
    write_text_atomic(storage.path(out) / "table.csv", csv_text(table))
    write_text_atomic(storage.path(out) / "pairs.csv", pairs_csv(table))
    return table


def markdown(t: Table) -> str:
    g, p = t.grid, t.grid.paper
    seeds = sorted({r["seed"] for r in t.records})
    lines = [f"# {g.title}", ""]
    lines.append(
        f"Grid `{g.name}` (`{g.path}`), preset `{g.preset}`, "
        f"seeds {_list(seeds) or 'none yet'}; commit {commits(t.records)}; "
        f"device {_devices(t.records)}.")
    if any(r.get("command") for r in t.records):
        lines.append(f"Made by {commands(t.records)}.")
    lines.append(
        f"Paper metric: {p.metric}, {'higher' if p.higher_is_better else 'lower'} is better "
        f"({p.source}). Ours: `{g.metric}`, {'lower' if g.lower_is_better else 'higher'} "
        f"is better, mean ± std over seeds. "
        + ("The paper gives an ordering without numbers, so only orderings are compared."
           if p.order_is_explicit and not any(v is not None for v in p.values.values())
           else "Only the orderings are compared, not the values."))
    lines.append("")
    metrics = (g.metric, *g.extra_metrics)
    header = ["cell", "n", *[f"`{m}`" for m in metrics], f"paper: {p.metric}",
              "rank (ours)", "rank (paper)"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "---:|" * (len(header) - 1))
    for row in t.rows:
        cells = [row.cell, str(row.stats[g.metric].n),
                 *[format_stat(row.stats[m]) for m in metrics],
                 *[format_number(x) for x in (row.paper_value, row.our_rank, row.paper_rank)]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _summary(t)]
    if t.pairs:
        lines += ["", *claims_lines(t.pairs, t.grid.metric)]
    if any((r.get("git") or {}).get("dirty") for r in t.records):
        lines += ["", "**Made from a dirty working tree: not reproducible from the commit alone.**"]
    missing = [f"{r.cell} (seed{'s' if len(r.missing_seeds) > 1 else ''} "
               f"{_list(r.missing_seeds)})" for r in t.rows if r.missing_seeds]
    if missing:
        lines += ["", f"Missing records: {'; '.join(missing)}."]
    if t.ignored:
        lines += ["", f"Ignored {t.ignored} record(s) of another grid, preset or cell."]
    if t.changed:
        lines += ["", t.changed]
    if g.notes.strip():
        lines += ["", f"Notes: {g.notes.strip()}"]
    if g.record_notes and t.records:
        lines += ["", f"From the records: {record_notes(g, t.records)}"]
    if has_curves(t.records):
        lines += ["", "![validation loss vs step, mean over seeds, min-max shaded](curves.png)"]
    return "\n".join(lines + [""])


def record_notes(grid, records: list[dict]) -> str:
    """The grid's ``record_notes`` hook's text: what its records hold (documents scored, limits, ...)."""
    return " ".join(str(spec.hook(grid.record_notes)(grid, records)).split())


def has_curves(records: list[dict]) -> bool:
    """Whether any record trained (evaluation-only grids have no validation curve to draw)."""
    return any(r.get("curve") for r in records)


def csv_text(t: Table) -> str:
    g = t.grid
    metrics = (g.metric, *g.extra_metrics)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["cell", "n_seeds", "seeds", *[f"{m}_{s}" for m in metrics for s in ("mean", "std")],
                "paper_value", "paper_rank", "our_rank", "missing_seeds"])
    for r in t.rows:
        w.writerow([r.cell, r.stats[g.metric].n, ";".join(map(str, r.seeds)),
                    *[_raw(x) for m in metrics for x in (r.stats[m].mean, r.stats[m].std)],
                    _raw(r.paper_value), _raw(r.paper_rank), _raw(r.our_rank),
                    ";".join(map(str, r.missing_seeds))])
    return buf.getvalue()


def _summary(t: Table) -> str:
    a = t.agreement
    if len(a.cells) < 2:
        return ("**Paper's ordered pairs: not comparable** (fewer than two cells have both "
                "a paper rank and a result).")
    if not t.pairs:
        return (f"**Paper's ordered pairs: none** (the paper ranks the {len(a.cells)} cells with results "
                "equal).")
    ranks = {r.cell: r for r in t.rows}
    paper_order = _order(a.cells, {c: ranks[c].paper_rank for c in a.cells})
    our_order = _order(a.cells, {c: ranks[c].our_rank for c in a.cells})
    tau = "undefined" if a.tau is None else f"{a.tau:.2f}"
    return (f"**Paper's ordered pairs: {verdicts.headline(t.pairs)}** (paired t-test over seeds, two-sided "
            f"α = {verdicts.ALPHA:g}); Kendall τ = {tau} over {len(a.cells)} cells (of the seed means). "
            f"Paper: {paper_order}; ours (means): {our_order}.")


def claims_lines(pairs: list[verdicts.Pair], metric: str) -> list[str]:
    """The per-pair section: Δ > 0 means the paper's better cell is better in our ``metric``."""
    lines = [f"Paper's claims, tested on per-seed paired differences Δ of `{metric}` (Δ > 0: ours "
             f"agrees; {100 * (1 - verdicts.ALPHA):g}% t interval; min. detectable: the smallest true |Δ| found "
             f"with {100 * power.POWER:g}% power at these seeds, from the observed spread of Δ; seeds needed: "
             "for a pair within noise, the seeds at which its mean Δ would be found so):", "",
             "| paper says | n | mean Δ | interval | p | verdict | min. detectable | seeds needed |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for pair in pairs:
        test = pair.test
        ci, p = format_ci(test.ci), format_p(test.p)
        verdict = test.verdict
        if verdict == "disagree":
            verdict += f": {pair.reason.replace('|', '/')}" if pair.reason else " (no reason written)"
        lines.append(f"| {pair.better} > {pair.worse} | {test.n} | {format_number(test.mean)} | {ci} | {p} "
                     f"| {verdict} | {format_number(test.min_detectable)} | {test.needs_text} |")
    return lines


def pairs_csv(t: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["better", "worse", "n", "mean_diff", "ci_low", "ci_high", "p", "verdict", "reason", "sd_diff",
                "min_detectable", "seeds_needed"])
    for pair in t.pairs:
        test = pair.test
        ci = test.ci or (None, None)
        w.writerow([pair.better, pair.worse, test.n, _raw(test.mean), _raw(ci[0]), _raw(ci[1]), _raw(test.p),
                    test.verdict, pair.reason, _raw(test.sd), _raw(test.min_detectable),
                    "" if test.verdict != "within noise" else test.needs_text])
    return buf.getvalue()


def _order(cells: list[str], ranks: dict[str, int]) -> str:
    ordered = sorted(cells, key=lambda c: ranks[c])
    text = ordered[0]
    for prev, cell in zip(ordered, ordered[1:]):
        text += (" = " if ranks[prev] == ranks[cell] else " > ") + cell
    return text


def commits(records: list[dict]) -> str:
    seen = []
    for rec in records:
        git = rec.get("git") or {}
        sha = git.get("commit")
        text = f"`{sha[:12]}`" if sha else "unknown"
        if git.get("dirty"):
            diff = git.get("diff_sha256")
            text += f" (dirty, diff sha256 `{diff[:12]}`)" if diff else " (dirty)"
        if text not in seen:
            seen.append(text)
    return ", ".join(seen) or "n/a"


def commands(records: list[dict], at_most: int = 3) -> str:
    """The distinct commands that made the records (``rec["command"]``), the first few of them."""
    seen = []
    for rec in records:
        if rec.get("command") and rec["command"] not in seen:
            seen.append(rec["command"])
    text = ", ".join(f"`{c}`" for c in seen[:at_most]) or "n/a"
    return text + (f" and {len(seen) - at_most} other command(s)" if len(seen) > at_most else "")


def _devices(records: list[dict]) -> str:
    seen = []
    for rec in records:
        d = rec.get("device") or {}
        text = f"{d.get('platform', '?')} x{d.get('device_count', '?')} ({d.get('device_kind', '?')})"
        if text not in seen:
            seen.append(text)
    return ", ".join(seen) or "n/a"


def _digits(x: float) -> int:
    """Decimals that show about four significant digits."""
    if x == 0 or not math.isfinite(x):
        return 3
    return min(6, max(0, 3 - math.floor(math.log10(abs(x)))))


def format_stat(s: Stat) -> str:
    """``mean ± std`` to about four significant digits (``mean`` alone for one value, ``—`` for none)."""
    if s.n == 0 or s.mean is None:
        return "—"
    d = _digits(s.mean)
    if s.std is None:
        return f"{s.mean:.{d}f}"
    return f"{s.mean:.{d}f} ± {s.std:.{d}f}"


def format_number(x) -> str:
    """An int as is, a float to about four significant digits without trailing zeros, ``—`` for None."""
    if x is None:
        return "—"
    if isinstance(x, int):
        return str(x)
    text = f"{x:.{_digits(x)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_ci(ci: tuple[float, float] | None) -> str:
    """A confidence interval as ``[low, high]``, ``—`` for None."""
    return "—" if ci is None else f"[{format_number(ci[0])}, {format_number(ci[1])}]"


def format_p(p: float | None) -> str:
    """A p-value to three decimals, in scientific notation below 0.001, ``—`` for None."""
    return "—" if p is None else f"{p:.3f}" if p >= 1e-3 else f"{p:.1e}"


def _raw(x) -> str:
    return "" if x is None else repr(x) if isinstance(x, float) else str(x)


def _list(xs) -> str:
    return ", ".join(map(str, xs))


def per_seed(records: list[dict], cells: list[str], metric: str) -> dict[str, dict[int, float]]:
    """``{cell: {seed: value}}`` of ``metric`` over ``records``, the input of :func:`verdicts.judge`."""
    return {cell: {int(r["seed"]): float(r["metrics"][metric]) for r in records
                   if r["cell"] == cell and _is_number(r.get("metrics", {}).get(metric))} for cell in cells}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
