"""Grid post hook for the EdgeInfinite tables: every category (and length) beside the paper.

``categories.md`` has one row per cell: our score per task category (mean ± std over seeds, percent
exact match) next to the paper's score for the LongBench category it stands in for
(:data:`edge_jax.papers.edgeinfinite.grid.PAPER_CATEGORY`), and the ordering of the cells within each
category against the paper's, and the answer NLL per category, under the base LM's own in-window exact
match (``base/inwindow/*``, which every record carries), and the paper's ordered pairs tested on the
answer NLL too, with the grid's own paired test: the graded score orders cells where exact match
cannot (every cell at 0, say). ``lengths.md`` has the overall score per input length.
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
from edge_jax.papers.edgeinfinite.grid import CATEGORIES, PAPER_CATEGORY, TABLE1, TABLE2
from edge_jax.utils.atomic import write_text_atomic


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


NLL = "longctx/answer_nll"


def nll_claims(grid, records: list[dict], cells: list[str]) -> list[str]:
    """The paper's ordered pairs tested on the answer NLL (lower is better), seed by seed."""
    pairs = verdicts.judge(per_seed(records, cells, NLL), grid.paper.ranks(), lower_is_better=True,
                           explanations=grid.explanations)
    if not pairs:
        return []
    return ["", f"On the answer NLL, the paper's ordered pairs: {verdicts.headline(pairs)} (the grid's paired "
                "t-test; lower NLL is better).", "", *claims_lines(pairs, NLL)]


def write_categories(grid, records: list[dict], out) -> list[Path]:
    """Write categories.md and lengths.md under ``out``; return their paths."""
    out = Path(out)
    cells = [c for c in grid.cells if any(r["cell"] == c for r in records)]
    paper = _paper_table(grid)
    head = "| cell | " + " | ".join(f"{c} (paper {PAPER_CATEGORY[c]})" for c in CATEGORIES) + " | overall (paper Avg) |"
    lines = [f"# {grid.title}: categories", ""]
    inwindow = {c: stat(sorted({float(r["metrics"][f"base/inwindow/{c}"]) for r in records  # one shared base: one value
                                if f"base/inwindow/{c}" in r.get("metrics", {})})) for c in ("single_needle", "multi_key")}
    if any(s.n for s in inwindow.values()):
        lines += ["The base LM inside its training window (its stage's check, full attention): exact match "
                  + ", ".join(f"{c} {format_stat(s)}" for c, s in inwindow.items()) + " percent.", ""]
    lines += ["Exact match in percent, mean ± std over seeds; beside each, the paper's score for the LongBench "
              "category the task stands in for.", "", head, "|" + "---|" * (len(CATEGORIES) + 2)]
    means: dict[str, dict[str, float]] = {c: {} for c in CATEGORIES + ("overall",)}
    for cell in cells:
        row = [cell]
        for cat in CATEGORIES + ("overall",):
            s = stat(_values(records, cell, f"longctx/{cat}"))
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
    lines += ["", "Teacher-forced NLL of the gold answer (nats per token, lower is better; a graded score where exact "
                  "match is zero):", "", "| cell | " + " | ".join(CATEGORIES) + " | all |",
              "|" + "---|" * (len(CATEGORIES) + 2)]
    for cell in cells:
        lines.append(f"| {cell} | " + " | ".join(format_stat(stat(_values(records, cell, f"longctx/answer_nll/{c}")))
                                                for c in CATEGORIES)
                     + f" | {format_stat(stat(_values(records, cell, NLL)))} |")
    lines += nll_claims(grid, records, cells)
    cat_path = out / "categories.md"
    write_text_atomic(cat_path, "\n".join(lines) + "\n")

    lengths = sorted({int(k[len("longctx/len"):]) for r in records for k in r.get("metrics", {})
                      if k.startswith("longctx/len")})
    rows = ["# " + grid.title + ": score by input length", "",
            "Overall exact match in percent (mean ± std over seeds) per prompt length in tokens.", "",
            "| cell | " + " | ".join(str(n) for n in lengths) + " |", "|" + "---|" * (len(lengths) + 1)]
    for cell in cells:
        rows.append(f"| {cell} | " + " | ".join(format_stat(stat(_values(records, cell, f"longctx/len{n}")))
                                               for n in lengths) + " |")
    len_path = out / "lengths.md"
    write_text_atomic(len_path, "\n".join(rows) + "\n")
    return [cat_path, len_path]
