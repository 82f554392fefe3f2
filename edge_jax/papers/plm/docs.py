"""PLM's generated-block kinds for docs/plm.md and README.md (``edge-jax docs``; :mod:`edge_jax.docgen`).

Every number is computed when the docs are filled: from the grids' records, the post hooks' committed
outputs (``decode.md``, ``arch_stats.md``), the ``bench mla-decode`` JSON, or, for parameter counts and
cache sizes, from the model shapes themselves (what ``edge-jax params`` and ``analyze kv-cache`` print):

    plm.params PART                       our count of PLM-1.8B (total, embedding, non_embedding) in B
    plm.params_vs_paper PART              that count / PLM Table 1's
    plm.kv SIZE WHAT                      cached values per token and layer: mla, mha (its twin), ratio;
                                          mla_bytes, mha_bytes: per token, all layers, 16 bits (eqs. 6-7)
    plm.pair GRID BETTER WORSE FIELD      a paper claim's paired test as the table gives it: mean, ci, p,
                                          min_detectable (Δ > 0: ours agrees)
    plm.min_detectable GRID               the range of the grid's claims' smallest detectable differences
    plm.range METRIC GRID ...             the range of cell means of METRIC over the grids' cells
    plm.ppl_share GRID CELL               the paper's Δppl <= 1 as a percentage of the cell's perplexity
    plm.md PATH ROW COLUMN                the leading number of a cell of a committed markdown table
    plm.md_ratio PATH ROW_A ROW_B COLUMN  the ratio of two such numbers
    plm.decode_table                      the ``bench mla-decode`` table, from its JSON
    plm.ratio_spread CONTEXT OTHER        absorbed / OTHER (naive, gqa) per round: median [p25-p75]
    plm.arch_table                        plm_arch_search: loss from the records, hardware columns from
                                          arch_stats.md
    plm.headline                          README's headline-result cell
"""
from __future__ import annotations

import functools
import re
import statistics

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import machine, number
from edge_jax.grid.tables import format_p, format_stat
from edge_jax.registry import DOC_BLOCKS

BENCH = "results/plm_mla_decode/bench.json"
ARCH_STATS = "results/plm_arch_search/arch_stats.md"
NUMBER = re.compile(r"-?[\d,]*\.?\d+(?:e[-+]?\d+)?")


@functools.lru_cache(maxsize=None)
def _model(size: str):
    from edge_jax.models.decoder import ModelConfig
    from edge_jax.models.presets import sized_config
    try:
        return ModelConfig.from_config(sized_config(f"plm_{size}").model)
    except Exception as e:  # noqa: BLE001 - an unknown size: one line
        raise DocBlockError(f"no PLM size {size!r} ({e}); sizes: tiny, 1p8b") from None


@functools.lru_cache(maxsize=None)
def _counts() -> dict:
    from edge_jax.models.count import param_breakdown
    return param_breakdown(_model("1p8b"))


def _paper_count(part: str) -> float:
    from edge_jax.papers.plm.params import PLM_PAPER
    if part not in PLM_PAPER["plm_1p8b"]:
        raise DocBlockError(f"plm.params: no part {part!r}; parts: {', '.join(PLM_PAPER['plm_1p8b'])}")
    return PLM_PAPER["plm_1p8b"][part]


@DOC_BLOCKS.register("plm.params")
def params(src, part: str) -> str:
    _paper_count(part)
    return f"{_counts()[part] / 1e9:.4f}B"


@DOC_BLOCKS.register("plm.params_vs_paper")
def params_vs_paper(src, part: str) -> str:
    return f"{_counts()[part] / _paper_count(part):.4f}"


@DOC_BLOCKS.register("plm.kv")
def kv(src, size: str, what: str, fmt: str = "") -> str:
    from edge_jax.papers.plm.kv_cache import formula_bytes, gqa_twin
    cfg = _model(size)
    mla, mha = (formula_bytes(c, 16) for c in (cfg, gqa_twin(cfg)))
    values = {"mla": mla["elements_per_layer"], "mha": mha["elements_per_layer"],
              "ratio": mla["elements_per_layer"] / mha["elements_per_layer"],
              "mla_bytes": int(mla["bytes"]), "mha_bytes": int(mha["bytes"])}
    if what not in values:
        raise DocBlockError(f"plm.kv: no {what!r}; one of {', '.join(values)}")
    return number(values[what], fmt=fmt or (".4f" if what == "ratio" else ",d"))


def _pair(src, grid: str, better: str, worse: str):
    for pair in src.table(grid).pairs:
        if (pair.better, pair.worse) == (better, worse):
            return pair.test
    raise DocBlockError(f"grid {grid} has no paper claim {better} > {worse}")


@DOC_BLOCKS.register("plm.pair")
def pair(src, grid: str, better: str, worse: str, field: str, fmt: str = "") -> str:
    test = _pair(src, grid, better, worse)
    if field == "p":
        return format_p(test.p)
    if field == "ci":
        return f"[{number(test.ci[0], fmt=fmt)}, {number(test.ci[1], fmt=fmt)}]"
    if field not in ("mean", "min_detectable"):
        raise DocBlockError(f"plm.pair: no field {field!r}; one of mean, ci, p, min_detectable")
    return number(getattr(test, field), fmt=fmt)


def _span(values, fmt: str) -> str:
    lo, hi = number(min(values), fmt=fmt), number(max(values), fmt=fmt)
    return lo if lo == hi else f"{lo}-{hi}"


@DOC_BLOCKS.register("plm.min_detectable")
def min_detectable(src, grid: str, fmt: str = "") -> str:
    return _span([p.test.min_detectable for p in src.table(grid).pairs], fmt)


@DOC_BLOCKS.register("plm.range")
def value_range(src, metric: str, *grids: str, fmt: str = ".3f") -> str:
    if not grids:
        raise DocBlockError("plm.range needs a metric and at least one grid")
    return _span([r.stats[metric].mean for g in grids for r in src.table(g).rows], fmt)


@DOC_BLOCKS.register("plm.ppl_share")
def ppl_share(src, grid: str, cell: str) -> str:
    return f"{100 / statistics.fmean(src.per_seed(grid, cell, 'val_ppl').values()):.0f}%"


def md_cell(src, rel: str, row: str, column: str) -> str:
    """The text of ``column`` in the row whose first cell is ``row``, in the first table of the committed
    markdown file ``rel`` that has that column."""
    for block in re.split(r"\n(?!\|)", src.path(rel).read_text()):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if len(lines) < 2:
            continue
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        if column not in header:
            continue
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] == row:
                return cells[header.index(column)]
    raise DocBlockError(f"{rel} has no table row {row!r} with a column {column!r}; rerun its post hook")


def md_number(src, rel: str, row: str, column: str) -> float:
    text = md_cell(src, rel, row, column)
    m = NUMBER.search(text)
    if not m:
        raise DocBlockError(f"{rel}: row {row!r}, column {column!r} holds no number ({text!r})")
    return float(m[0].replace(",", ""))


@DOC_BLOCKS.register("plm.md")
def md(src, rel: str, row: str, column: str, fmt: str = "") -> str:
    return number(md_number(src, rel, row, column), fmt=fmt)


@DOC_BLOCKS.register("plm.md_ratio")
def md_ratio(src, rel: str, row_a: str, row_b: str, column: str, fmt: str = ".2f") -> str:
    return number(md_number(src, rel, row_a, column) / md_number(src, rel, row_b, column), fmt=fmt)


def _bench(src) -> dict:
    result = src.json(BENCH).get("result")
    if not result:
        raise DocBlockError(f"{BENCH} has no measurements; rerun edge-jax bench mla-decode --json {BENCH}")
    return result


def _context(src, ctx: str) -> dict:
    contexts = _bench(src)["contexts"]
    if ctx not in contexts:
        raise DocBlockError(f"{BENCH} has no context {ctx}; it has {', '.join(contexts)}")
    return contexts[ctx]


@DOC_BLOCKS.register("plm.ratio_spread")
def ratio_spread(src, ctx: str, other: str) -> str:
    x, key = _context(src, ctx), f"absorbed_vs_{other}"
    if key not in x["round_ratio"]:
        raise DocBlockError(f"plm.ratio_spread: no {other!r}; one of naive, gqa")
    lo, hi = x["round_ratio_p25_p75"][key]
    return f"{x['round_ratio'][key]:.2f} [{lo:.2f}-{hi:.2f}]"


@DOC_BLOCKS.register("plm.decode_table")
def decode_table(src) -> str:
    contexts = _bench(src)["contexts"]
    lines = ["| context | MLA naive | MLA absorbed | MHA | absorbed / naive | absorbed / MHA | cache MB: MLA | MHA |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ctx, x in contexts.items():
        t = x["tokens_per_s"]
        lines.append(f"| {ctx} | {t['naive']:.2f} | {t['absorbed']:.2f} | {t['gqa']:.2f} | "
                     f"{ratio_spread(src, ctx, 'naive')} | {ratio_spread(src, ctx, 'gqa')} | "
                     f"{x['cache_mb']['mla']:.1f} | {x['cache_mb']['gqa']:.1f} |")
    return "\n".join(lines)


ARCH_LABELS = {"L2_d192_kv48": "2 layers, d 192, d_c 48", "L4_d128_kv64": "4 layers, d 128, d_c 64",
               "L4_d128_kv32": "4 layers, d 128, d_c 32", "L6_d96_kv24": "6 layers, d 96, d_c 24"}
ARCH_COLUMNS = ("non-emb.", "MACs/token", "time/layer (ms)", "peak memory (MB)")


@DOC_BLOCKS.register("plm.arch_table")
def arch_table(src) -> str:
    t = src.table("plm_arch_search")
    lines = ["| cell | val_loss | non-embedding params | MACs/token | time/layer (ms) | peak memory (MB) |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in sorted(t.rows, key=lambda r: r.stats[t.grid.metric].mean):
        hardware = [md_cell(src, ARCH_STATS, row.cell, c) for c in ARCH_COLUMNS]
        lines.append(f"| {ARCH_LABELS.get(row.cell, row.cell)} | {format_stat(row.stats[t.grid.metric])} | "
                     + " | ".join(hardware) + " |")
    return "\n".join(lines)


@DOC_BLOCKS.register("plm.headline")
def headline(src) -> str:
    def rate(cell, metric):
        return number(statistics.fmean(src.per_seed("plm_activation", cell, metric).values()), fmt=".3f")
    naive = _context(src, "8192")
    return (f"{params(src, 'total')} parameters (paper 1.83B); {kv(src, '1p8b', 'mla')} vs "
            f"{kv(src, '1p8b', 'mha')} cached values per token and layer ({kv(src, '1p8b', 'ratio')}); absorbed "
            f"MLA decodes {naive['round_ratio']['absorbed_vs_naive']:.2f}× faster than naive at 8K "
            f"({machine(src, BENCH)}; "
            f"median per round); activation sparsity rate at Δppl ≤ 1% of the model's perplexity (the headline) "
            f"ReLU² {rate('relu2', 'sparsity_rate')} vs SwiGLU {rate('swiglu', 'sparsity_rate')} "
            f"({rate('relu2', 'sparsity_rate_abs')} vs {rate('swiglu', 'sparsity_rate_abs')} at the paper's "
            f"absolute Δppl ≤ 1)")


COMPILE = "results/plm_attention/paper_compile.json"


@DOC_BLOCKS.register("plm.compile")
def compile_span(src, column: str, how: str = "range", topology: str = "v5p-128") -> str:
    """A column of the paper-preset compile table over its rows: ``range`` (``12,661-13,998 ms``) or
    ``sum`` (``75.2 d``) of each row's leading number, with the unit the cells print."""
    rows = (src.json(COMPILE).get(topology) or {}).get("rows") or {}
    cells = [str(row.get(column, "")) for row in rows.values()]
    found = [NUMBER.search(c) for c in cells]
    if not cells or not all(found):
        raise DocBlockError(f"{COMPILE}: {topology} has no numeric column {column!r}")
    values = [float(m[0].replace(",", "")) for m in found]
    unit = cells[0][found[0].end():].split("(")[0].strip()
    decimals = len(found[0][0].partition(".")[2])
    fmt = f",.{decimals}f"
    if how == "sum":
        return f"{number(sum(values), fmt=fmt)} {unit}".strip()
    if how != "range":
        raise DocBlockError(f"plm.compile: {how!r} is not range or sum")
    return f"{_span(values, fmt)} {unit}".strip()
