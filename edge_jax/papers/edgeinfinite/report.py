"""Grid post hook for the EdgeInfinite tables: every category (and length) beside the paper.

``categories.md`` has one row per cell: our score per task category (mean ± std over seeds, percent
exact match) next to the paper's score for the LongBench category it stands in for
(:data:`edge_jax.papers.edgeinfinite.grid.PAPER_CATEGORY`), and the ordering of the cells within each
category against the paper's, and the answer NLL per category, under the base LM's own in-window exact
match (``base/inwindow/*``, which every record carries), and the paper's ordered pairs tested on the
answer NLL too, with the grid's own paired test: the graded score orders cells where exact match
cannot (every cell at 0, say). Records with a near band (``longctx/near/*``: lengths near the base's
window) get the same section for it, with the paper's pairs also tested on its exact match.
``lengths.md`` has the overall score per input length, the near band's lengths marked.
"""
from __future__ import annotations

from pathlib import Path

from edge_jax.grid import verdicts
from edge_jax.grid.tables import (
    claims_lines,
    competition_ranks,
    format_number,
    format_stat,
    kendall_tau_b,
    per_seed,
    stat,
)
from edge_jax.papers.edgeinfinite.grid import CATEGORIES, METRIC, NEAR, PAPER_CATEGORY, TABLE1, TABLE2
from edge_jax.utils.atomic import write_text_atomic

FAR = "longctx/"  # the paper's band: the grid's metric and its categories


def _paper_table(grid) -> dict:
    return TABLE2 if grid.name == "edgeinfinite_tokens" else TABLE1


def _values(records: list[dict], cell: str, key: str) -> list[float]:
    return [float(r["metrics"][key]) for r in records if r["cell"] == cell and key in r.get("metrics", {})]


def _agreement(cells: list[str], ours: dict[str, float], paper: dict[str, float]) -> str:
    have = [c for c in cells if ours.get(c) is not None and c in paper]
    if len(have) < 2:
        return "—"
    tau = kendall_tau_b([ours[c] for c in have], [paper[c] for c in have])
    return "—" if tau is None else f"{tau:+.2f}"


def claims(grid, records: list[dict], cells: list[str], metric: str, what: str, lower_is_better: bool) -> list[str]:
    """The paper's ordered pairs tested on ``metric`` seed by seed (``what`` names it in the heading)."""
    pairs = verdicts.judge(per_seed(records, cells, metric), grid.paper.ranks(), lower_is_better=lower_is_better,
                           explanations=grid.explanations)
    if not pairs:
        return []
    better = "lower" if lower_is_better else "higher"
    return ["", f"On {what}, the paper's ordered pairs: {verdicts.headline(pairs)} (the grid's paired t-test; "
                f"{better} is better).", "", *claims_lines(pairs, metric)]


def _band_lines(grid, records: list[dict], cells: list[str], prefix: str) -> list[str]:
    """Exact match per category beside the paper's, the orderings, the answer NLL per category and (the
    near band, whose overall is not the grid's metric) the paper's pairs on its exact match; both bands
    test the pairs on their answer NLL."""
    paper = _paper_table(grid)
    head = "| cell | " + " | ".join(f"{c} (paper {PAPER_CATEGORY[c]})" for c in CATEGORIES) + " | overall (paper Avg) |"
    lines = ["Exact match in percent, mean ± std over seeds; beside each, the paper's score for the LongBench "
             "category the task stands in for.", "", head, "|" + "---|" * (len(CATEGORIES) + 2)]
    means: dict[str, dict[str, float]] = {c: {} for c in CATEGORIES + ("overall",)}
    for cell in cells:
        row = [cell]
        for cat in CATEGORIES + ("overall",):
            s = stat(_values(records, cell, f"{prefix}{cat}"))
            means[cat][cell] = s.mean
            ref = paper.get(cell, {}).get("Avg" if cat == "overall" else PAPER_CATEGORY[cat])
            row.append(f"{format_stat(s)} ({format_number(ref)})")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Ordering agreement per category (Kendall's tau-b between our means and the paper's scores, "
                  "+1 = same order):", ""]
    for cat in CATEGORIES + ("overall",):
        ref = {c: paper[c]["Avg" if cat == "overall" else PAPER_CATEGORY[cat]] for c in cells if c in paper}
        have = {c: v for c, v in means[cat].items() if v is not None}
        if len(set(have.values())) <= 1:
            lines.append(f"- {cat}: all cells tied at {format_number(next(iter(have.values()), None))}, no ordering")
            continue
        ranks = competition_ranks(have, False)
        lines.append(f"- {cat}: {_agreement(cells, means[cat], ref)}; ours best first: "
                     + ", ".join(sorted(have, key=lambda c: ranks[c])))
    nll = f"{prefix}answer_nll"
    lines += ["", "Teacher-forced NLL of the gold answer (nats per token, lower is better; a graded score where exact "
                  "match is zero):", "", "| cell | " + " | ".join(CATEGORIES) + " | all |",
              "|" + "---|" * (len(CATEGORIES) + 2)]
    for cell in cells:
        lines.append(f"| {cell} | " + " | ".join(format_stat(stat(_values(records, cell, f"{nll}/{c}")))
                                                for c in CATEGORIES)
                     + f" | {format_stat(stat(_values(records, cell, nll)))} |")
    if prefix != FAR:  # the grid's table tests the paper's band's exact match (METRIC) already
        lines += claims(grid, records, cells, f"{prefix}overall", "the near band's exact match", False)
    return lines + claims(grid, records, cells, nll, "the near band's answer NLL" if prefix != FAR
                          else "the answer NLL", True)


def _near_lengths(records: list[dict]) -> set[int]:
    return {int(n) for r in records for n in r.get("config", {}).get("longctx", {}).get("near_lengths", ())}


def write_categories(grid, records: list[dict], out) -> list[Path]:
    """Write categories.md and lengths.md under ``out``; return their paths."""
    out = Path(out)
    cells = [c for c in grid.cells if any(r["cell"] == c for r in records)]
    lines = [f"# {grid.title}: categories", ""]
    inwindow = {c: stat(sorted({float(r["metrics"][f"base/inwindow/{c}"]) for r in records  # one shared base: one value
                                if f"base/inwindow/{c}" in r.get("metrics", {})}))
                for c in ("single_needle", "multi_key")}
    if any(s.n for s in inwindow.values()):
        lines += ["The base LM inside its training window (its stage's check, full attention): exact match "
                  + ", ".join(f"{c} {format_stat(s)}" for c, s in inwindow.items()) + " percent.", ""]
    near = any(f"{NEAR}overall" in r.get("metrics", {}) for r in records)
    if near:
        lines += [f"## The paper's band (`{METRIC}`, the table's score)", ""]
    lines += _band_lines(grid, records, cells, FAR)
    if near:
        lengths = ", ".join(f"{n:,}" for n in sorted(_near_lengths(records))) or "see lengths.md"
        lines += ["", f"## The near band (`{NEAR}overall`; {lengths} tokens)", "",
                  *_band_lines(grid, records, cells, NEAR)]
    cat_path = out / "categories.md"
    write_text_atomic(cat_path, "\n".join(lines) + "\n")

    lengths = sorted({int(k[len("longctx/len"):]) for r in records for k in r.get("metrics", {})
                      if k.startswith("longctx/len")})
    marked = _near_lengths(records)
    rows = ["# " + grid.title + ": score by input length", "",
            "Overall exact match in percent (mean ± std over seeds) per prompt length in tokens"
            + (" (near: the near band, scored apart as longctx/near/*)." if marked & set(lengths) else "."), "",
            "| cell | " + " | ".join(f"{n} (near)" if n in marked else str(n) for n in lengths) + " |",
            "|" + "---|" * (len(lengths) + 1)]
    for cell in cells:
        rows.append(f"| {cell} | " + " | ".join(format_stat(stat(_values(records, cell, f"longctx/len{n}")))
                                               for n in lengths) + " |")
    len_path = out / "lengths.md"
    write_text_atomic(len_path, "\n".join(rows) + "\n")
    return [cat_path, len_path]
