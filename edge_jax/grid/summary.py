"""`edge-jax summary`: one row per ablation grid, built from its records like its table.

    edge-jax summary [--ablations ablations] [--results results] [--preset tiny]

Per grid: cells, the fewest seeds a cell has, the commits its records name, the paper's ordered pairs
that agree, disagree or are within noise (:mod:`edge_jax.grid.verdicts`), the median over pairs of the
smallest difference the seeds could detect and the seeds each within-noise pair would need
(:mod:`edge_jax.grid.power`), Kendall's tau, and every
ordering the paper claims that our seeds significantly contradict (a ``disagree`` verdict), written as
the paper's claim, ``paper says a > b`` (ours: b above a), with the reason written in the ablation file
(``explanations``); record files that could not be read are named in stderr and at the end of the row. The
README's summary table is this command's output (stdout); a line per ablation
file goes to stderr as it is read.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Callable

from edge_jax.errors import UserError
from edge_jax.grid import runner, spec, tables, verdicts
from edge_jax.grid.command import default_out


@dataclasses.dataclass
class Row:
    grid: str
    ablation: str
    table: tables.Table | None = None
    problem: str = ""            # why there is no table (no such preset, no records)
    out: str = ""                # the grid's output directory, where its table.md is
    unreadable: list[str] = dataclasses.field(default_factory=list)   # record files that could not be read


def summarize(ablations: str | Path, results: str | Path, preset: str = "tiny",
              log: Callable[[str], None] | None = None) -> list[Row]:
    """A row per ablation file under ``ablations`` (sorted by name); ``log`` gets a line per file as it is
    read, and the warnings about unreadable records."""
    rows = []
    paths = sorted(Path(ablations).glob("*.py"))
    for i, path in enumerate(paths, 1):
        if log:
            log(f"grid {i}/{len(paths)}: {path}")
        try:
            grid = spec.load_grid(path, preset)
        except spec.GridSpecError as e:
            rows.append(Row(path.stem, str(path), problem=f"not loadable at preset {preset}: {e}"))
            continue
        out = Path(results) / default_out(grid).name
        records = runner.load_records(out, log)
        unreadable = [p.as_posix() for p, _ in records.unreadable]
        if not records:
            rows.append(Row(grid.name, str(path), problem="no records yet" if not unreadable else
                            "no readable record", unreadable=unreadable))
            continue
        rows.append(Row(grid.name, str(path), tables.build_table(grid, records), out=out.as_posix(),
                        unreadable=unreadable))
    return rows


def markdown(rows: list[Row]) -> str:
    lines = [f"| grid | cells | seeds | commit | agree | disagree | within noise | min. detectable Δ "
             f"| seeds the within-noise pairs need | Kendall τ | paper's orderings our seeds contradict "
             f"(α = {verdicts.ALPHA:g}) |",
             "|---|---:|---:|---|---:|---:|---:|---:|---|---:|---|"]
    for row in rows:
        t = row.table
        if t is None:
            lines.append(f"| {row.grid} | | | | | | | | | | {_cell(_with_unreadable(row.problem, row))} |")
            continue
        counts = verdicts.counts(t.pairs)
        seeds = min((r.stats[t.grid.metric].n for r in t.rows), default=0)
        tau = "—" if t.agreement.tau is None else f"{t.agreement.tau:.2f}"
        lines.append(f"| [{row.grid}]({row.out}/table.md) | {len(t.rows)} | {seeds} | "
                     f"{tables.commits(t.records)} | {counts['agree']} | {counts['disagree']} | "
                     f"{counts['within noise']} | {_detectable(t.pairs)} | {_needs(t.pairs)} | {tau} | "
                     f"{_cell(_with_unreadable(_last_column(t, counts), row))} |")
    return "\n".join(lines) + "\n"


def _with_unreadable(text: str, row: Row) -> str:
    """``text``, then the record files of the grid that could not be read (``1 unreadable record: PATH``)."""
    if not row.unreadable:
        return text
    n = len(row.unreadable)
    return f"{text}; {n} unreadable record{'s' if n > 1 else ''}: {', '.join(row.unreadable)}"


def _detectable(pairs: list[verdicts.Pair]) -> str:
    """The median over pairs of the smallest true difference each finds with 80 % power, in the metric's units."""
    values = sorted(p.test.min_detectable for p in pairs if p.test.min_detectable is not None)
    return tables.format_number(statistics.median(values)) if values else "—"


def _needs(pairs: list[verdicts.Pair]) -> str:
    """The seeds each within-noise pair's observed difference needs, ascending: ``5, 8, 31, > 1000, never × 2``."""
    texts = [p.test.needs_text for p in pairs if p.test.verdict == "within noise"]
    if not texts:
        return "—"
    counted = collections.Counter(texts)
    order = sorted(counted, key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x))
    return ", ".join(x if counted[x] == 1 else f"{x} × {counted[x]}" for x in order)


def _last_column(t: tables.Table, counts: dict[str, int]) -> str:
    """The paper's orderings we contradict significantly (``paper says a > b, c > d: reason``: a pair is the
    paper's claim, and our seeds put its second cell above its first), and why a grid has fewer verdicts
    than pairs."""
    if not any(r.stats[t.grid.metric].n for r in t.rows):
        return f"no record has the metric `{t.grid.metric}`"
    if not t.grid.paper.ranks():
        return "the paper orders none of these cells"
    if len(t.agreement.cells) < 2:
        return "fewer than 2 cells the paper ranks have results"
    if not t.pairs:
        return "the paper ranks the cells with results equal"
    by_reason: dict[str, list[str]] = {}  # pairs that share a reason are listed once, before it
    for p in t.pairs:
        if p.test.verdict == "disagree":
            by_reason.setdefault(p.reason or "(no reason written)", []).append(f"{p.better} > {p.worse}")
    parts = [f"paper says {', '.join(names)}: {reason}" for reason, names in by_reason.items()] or ["none"]
    if counts["n/a"]:
        parts.append(f"{counts['n/a']} pair(s) n/a (fewer than 2 paired seeds)")
    return "; ".join(parts)


def _cell(text: str) -> str:
    """Text that stays in one markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ablations", default="ablations", help="directory of ablation files (default: ablations)")
    parser.add_argument("--results", default="results", help="directory of grid outputs (default: results)")
    parser.add_argument("--preset", default="tiny", help="grid preset (default: tiny)")


def run(args: argparse.Namespace) -> int:
    if not Path(args.ablations).is_dir():
        print(f"error: no ablations directory {args.ablations}; pass --ablations DIR")
        return 2
    if not Path(args.results).is_dir():
        raise UserError(f"--results {args.results} does not exist; pass the directory the grids wrote their "
                        "outputs to (default: results, beside ablations/)")
    print(markdown(summarize(args.ablations, args.results, args.preset, log=_progress)), end="")
    return 0


def _progress(line: str) -> None:
    """Progress on stderr, so that stdout stays the table."""
    print(f"edge-jax summary: {line}", file=sys.stderr, flush=True)
