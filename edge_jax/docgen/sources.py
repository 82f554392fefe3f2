"""What generated blocks read (:class:`Sources`: the grids' tables from their records, committed JSON) and
the generic block kinds, registered in :data:`edge_jax.registry.DOC_BLOCKS`.

Every kind is ``fn(src, *args, **options) -> str``. Numbers print as the tables print them
(:func:`edge_jax.grid.tables.format_number`: about four significant digits) unless ``fmt=`` gives a Python
format (``fmt=.2f``, ``fmt=,.0f``); ``scale=`` multiplies first (``scale=100`` for a percentage):

    summary                                  the README's table: a row per grid (edge-jax summary)
    mean GRID CELL METRIC                    a cell's mean over its seeds
    stat GRID CELL METRIC                    ``mean ± std`` over its seeds
    seeds GRID [CELL]                        the seeds a cell has (the fewest over cells without CELL)
    diff GRID A B METRIC                     the mean over paired seeds of A - B
    p GRID A B METRIC                        the paired t-test's two-sided p of A - B
    goal PATH KEY OP TARGET                  ``met`` or ``not met``: a committed JSON value against a goal
                                             (OP: at_least, above, at_most, below), e.g.
                                             ``goal results/x/bench.json ratio at_least 0.98``
    report PATH                              what a benchmark printed (its --json ``report``), as a text block
    machine PATH                             where a benchmark's JSON was measured, from its provenance:
                                             ``2-core CPU, load average 0.2 at its start`` or ``NVIDIA H200``
    json PATH KEY                            a value of a committed JSON file (KEY dotted: ``cases.0.ratio``, or
                                             one argument per level: ``v5p-128 rows meki_4b "est. step"``)
"""
from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.grid import runner, spec, tables, verdicts
from edge_jax.registry import DOC_BLOCKS


class Sources:
    """The repository's ``results`` and ``ablations`` seen from ``root``, at one preset; each grid's table
    is built once from its records, as ``edge-jax grid --tables-only`` builds it."""

    def __init__(self, root: str | Path = ".", results: str = "results", ablations: str = "ablations",
                 preset: str = "tiny"):
        self.root = Path(root)
        self.results, self.ablations, self.preset = results, ablations, preset

    def path(self, rel: str) -> Path:
        """A file named relative to the repository root; one line if it is not there."""
        path = self.root / rel
        if not path.is_file():
            raise DocBlockError(f"{rel} does not exist; commit the run's output first (its command is in the docs)")
        return path

    @functools.lru_cache(maxsize=None)
    def table(self, grid: str) -> tables.Table:
        ablation = self.root / self.ablations / f"{grid}.py"
        if not ablation.is_file():
            raise DocBlockError(f"no ablation file {self.ablations}/{grid}.py")
        g = spec.load_grid(ablation, self.preset)
        records = runner.load_records(self.root / self.results / grid)
        if not records:
            raise DocBlockError(f"grid {grid} has no records under {self.results}/{grid}/records")
        return tables.build_table(g, records)

    def per_seed(self, grid: str, cell: str, metric: str) -> dict[int, float]:
        t = self.table(grid)
        if cell not in t.grid.cells:
            raise DocBlockError(f"grid {grid} has no cell {cell!r}; cells: {', '.join(t.grid.cells)}")
        values = tables.per_seed(t.records, [cell], metric)[cell]
        if not values:
            raise DocBlockError(f"no record of {grid}/{cell} has the metric {metric!r}")
        return values

    def paired(self, grid: str, a: str, b: str, metric: str) -> list[float]:
        """``A - B`` of ``metric`` over the seeds both cells have, in seed order (empty when they share none)."""
        x, y = self.per_seed(grid, a, metric), self.per_seed(grid, b, metric)
        return [x[s] - y[s] for s in sorted(set(x) & set(y))]

    def value(self, rel: str, parts) -> object:
        """The value at the key path ``parts`` (list indices as digits) of the committed JSON file ``rel``."""
        value = self.json(rel)
        for part in parts:
            try:
                value = value[int(part)] if isinstance(value, list) else value[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise DocBlockError(f"{rel} has no {'.'.join(parts)!r} (stopped at {part!r})") from None
        return value

    @functools.lru_cache(maxsize=None)
    def json(self, rel: str):
        try:
            return json.loads(self.path(rel).read_text())
        except ValueError as e:
            raise DocBlockError(f"{rel} is not valid JSON ({e}); rerun the command that wrote it") from None


def number(x, scale: str = "1", fmt: str = "") -> str:
    """``x × scale`` as the tables print numbers, or with the format ``fmt``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise DocBlockError(f"{x!r} is not a number")
    if scale != "1":
        x = x * float(scale)
    if fmt:
        try:
            return format(x, fmt)
        except ValueError as e:
            raise DocBlockError(f"fmt={fmt}: {e}") from None
    return tables.format_number(x)


@DOC_BLOCKS.register("summary")
def summary(src: Sources) -> str:
    from edge_jax.grid import summary as grid_summary
    rows = grid_summary.summarize(src.root / src.ablations, src.root / src.results, src.preset)
    for row in rows:  # links relative to the repository, wherever it is
        row.out = Path(row.out).relative_to(src.root).as_posix() if row.out else row.out
    return grid_summary.markdown(rows)


@DOC_BLOCKS.register("mean")
def mean(src: Sources, grid: str, cell: str, metric: str, scale: str = "1", fmt: str = "") -> str:
    return number(statistics.fmean(src.per_seed(grid, cell, metric).values()), scale, fmt)


@DOC_BLOCKS.register("stat")
def stat(src: Sources, grid: str, cell: str, metric: str, scale: str = "1", fmt: str = "") -> str:
    values = list(src.per_seed(grid, cell, metric).values())
    m = statistics.fmean(values)
    if len(values) < 2:
        return number(m, scale, fmt)
    if not fmt:
        s = tables.stat([v * float(scale) for v in values])
        return tables.format_stat(s)
    return f"{number(m, scale, fmt)} ± {number(statistics.stdev(values) * abs(float(scale)), '1', fmt)}"


@DOC_BLOCKS.register("seeds")
def seeds(src: Sources, grid: str, cell: str = "") -> str:
    t = src.table(grid)
    if cell:
        return str(len(src.per_seed(grid, cell, t.grid.metric)))
    return str(min(r.stats[t.grid.metric].n for r in t.rows))


def _paired(src: Sources, grid: str, a: str, b: str, metric: str) -> list[float]:
    diffs = src.paired(grid, a, b, metric)
    if not diffs:
        raise DocBlockError(f"grid {grid}: cells {a} and {b} share no seed with {metric!r}")
    return diffs


@DOC_BLOCKS.register("diff")
def diff(src: Sources, grid: str, a: str, b: str, metric: str, scale: str = "1", fmt: str = "") -> str:
    return number(statistics.fmean(_paired(src, grid, a, b, metric)), scale, fmt)


@DOC_BLOCKS.register("p")
def p(src: Sources, grid: str, a: str, b: str, metric: str) -> str:
    return tables.format_p(verdicts.paired_t(_paired(src, grid, a, b, metric)).p)


@DOC_BLOCKS.register("json")
def json_value(src: Sources, rel: str, *key: str, scale: str = "1", fmt: str = "") -> str:
    """The value at ``key`` in a committed JSON file: one dotted key (``cases.0.ratio``), or one argument per
    level for keys that hold dots or spaces (``v5p-128 rows meki_4b "est. step"``)."""
    if not key:
        raise DocBlockError(f"json {rel}: name the value, e.g. json {rel} cases.0.ratio")
    value = src.value(rel, key[0].split(".") if len(key) == 1 else list(key))
    return value if isinstance(value, str) else number(value, scale, fmt)


COMPILE_COLUMNS = ("topology, mesh", "HBM / device", "fits", "est. step", "est. MFU",
                   "est. time for the run's tokens")


@DOC_BLOCKS.register("compile_table")
def compile_table(src: Sources, *pairs: str) -> str:
    """Rows of committed compile tables (``edge-jax grid --compile-only``'s ``<preset>_compile.json``), one per
    ``LABEL GRID/FILE/TOPOLOGY/RUN`` pair of arguments (``"MeKi T1 \\`meki\\`" meki_main/paper/v5p-128/meki``)."""
    if not pairs or len(pairs) % 2:
        raise DocBlockError("compile_table takes pairs of arguments: LABEL GRID/PRESET/TOPOLOGY/RUN ...")
    lines = ["| grid, run | " + " | ".join(COMPILE_COLUMNS) + " |", "|---" * (len(COMPILE_COLUMNS) + 1) + "|"]
    for label, ref in zip(pairs[::2], pairs[1::2]):
        try:
            grid, preset, topology, run = ref.split("/")
        except ValueError:
            raise DocBlockError(f"compile_table: {ref!r} is not GRID/PRESET/TOPOLOGY/RUN") from None
        rel = f"{src.results}/{grid}/{preset}_compile.json"
        row = json_row(src, rel, topology, run)
        mesh = " × ".join(f"{axis} {n}" for axis, n in (kv.split("=") for kv in row["mesh"].split(",")) if n != "1")
        mesh = mesh or "one device"
        fits = row["fits"] if row["fits"] == "yes" or not row["fix"] else "with " + " ".join(
            f"`{flag.removeprefix('--config.').removeprefix('--set ')}`" for flag in row["fix"].split())
        cells = [f"{topology}, {mesh}", row["HBM / device"], fits, row["est. step"], row["est. MFU"],
                 row["est. time for budget"]]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def json_row(src: Sources, rel: str, topology: str, run: str) -> dict:
    data = src.json(rel)
    try:
        return data[topology]["rows"][run]
    except (KeyError, TypeError):
        raise DocBlockError(f"{rel} has no run {run!r} on {topology}") from None


@DOC_BLOCKS.register("machine")
def machine(src: Sources, rel: str) -> str:
    """Where the benchmark behind ``rel`` ran, in words, from its ``provenance`` (bench --json)."""
    prov = src.json(rel).get("provenance") if isinstance(src.json(rel), dict) else None
    if not prov:
        raise DocBlockError(f"{rel} has no provenance; rerun its benchmark with --json {rel}")
    device, host = prov.get("device") or {}, prov.get("host") or {}
    if device.get("platform") != "cpu":
        return str(device.get("device_kind") or device.get("platform") or "an unknown device")
    load = host.get("load_avg_1m")
    return f"{host.get('cpus')}-core CPU" + ("" if load is None else f", load average {load:.1f} at its start")


GOAL_OPS = {"at_least": lambda a, b: a >= b, "above": lambda a, b: a > b, "at_most": lambda a, b: a <= b,
            "below": lambda a, b: a < b}


@DOC_BLOCKS.register("goal")
def goal(src: Sources, rel: str, key: str, op: str, target: str) -> str:
    """Whether the value at ``key`` of a committed JSON meets ``op target``: ``met`` or ``not met``."""
    if op not in GOAL_OPS:
        raise DocBlockError(f"goal: {op!r} is not one of {', '.join(GOAL_OPS)}")
    value = json_value(src, rel, key, fmt=".17g")
    return "met" if GOAL_OPS[op](float(value), float(target)) else "not met"


@DOC_BLOCKS.register("report")
def report(src: Sources, rel: str) -> str:
    """The report a benchmark printed, from its --json file, as a fenced text block (a multi-line block)."""
    data = src.json(rel)
    if not isinstance(data, dict) or not isinstance(data.get("report"), str):
        raise DocBlockError(f"{rel} holds no report; rerun its benchmark with --json {rel}")
    return "```text\n" + data["report"].rstrip("\n") + "\n```"
