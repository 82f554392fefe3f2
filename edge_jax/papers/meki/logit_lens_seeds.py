"""LogitLens over seeds: runs grouped by (cell, seed), per-layer mean ± std, paired tests per layer.

A run is one trained workdir of one cell and seed. Workdirs in a grid's layout, ``OUT/runs/<cell>/seed<s>``,
are grouped by themselves (cell: the parent directory's name, seed: the ``seed<s>`` name, checked against
the run's ``config.json``); any other workdir is its own cell, named by its base name, with the seed of
its ``config.json``. ``--label`` names the cells explicitly (the same label for the seeds of one cell).

Per cell and layer the KL in both directions is summarised as mean ± sample std over the cell's seeds.
A claim ``better:worse`` (the paper: ``better`` has the lower KL at every layer) is tested per layer and
direction on the seeds both cells have: ``d_s = KL(worse, s) - KL(better, s)`` (> 0: ours agrees on seed
``s``), by :func:`edge_jax.grid.verdicts.paired_t`. The last layer is left out: its early exit is the
model's output, so its KL is 0 in every run.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
from pathlib import Path

from edge_jax.errors import ConfigError, unknown
from edge_jax.grid import verdicts
from edge_jax.grid.tables import Stat, format_ci, format_number, format_p, format_stat, stat
from edge_jax.utils.atomic import write_text_atomic
from edge_jax.utils.workdirs import workdir_labels

# result key, title, short name (CSV ``direction``, headline)
DIRECTIONS = (("kl", "KL(early exit || final output)", "early||final"),
              ("kl_reverse", "KL(final output || early exit)", "final||early"))
_SEED_DIR = re.compile(r"seed(\d+)")


@dataclasses.dataclass(frozen=True)
class Run:
    cell: str
    seed: int
    workdir: str


@dataclasses.dataclass(frozen=True)
class Comparison:
    better: str                  # the paper: lower KL at every layer
    worse: str
    seeds: tuple[int, ...]       # the seeds both cells have
    layers: int                  # layers tested: 0 .. layers - 1 (the shallower model's last is left out)
    tests: dict                  # result key -> [verdicts.Pair] per layer


def config_seed(workdir: str) -> int | None:
    """The ``seed`` in the workdir's ``config.json`` (None without one)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        seed = json.load(f).get("seed")
    return None if seed is None else int(seed)


def seed_of(workdir: str) -> int:
    """The run's seed: its ``seed<s>`` directory name or its config's ``seed`` (they must agree)."""
    m = _SEED_DIR.fullmatch(Path(os.path.abspath(workdir)).name)
    named, saved = (int(m.group(1)) if m else None), config_seed(workdir)
    if named is not None and saved is not None and named != saved:
        raise ConfigError(f"{workdir!r} is named seed{named} but its config.json has seed {saved}; "
                          "rename the directory or pass the run of that seed")
    if named is None and saved is None:
        raise ConfigError(f"{workdir!r}: no seed<s> directory name and no seed in a config.json; "
                          "give the workdir of a run of `edge-jax train`")
    return named if named is not None else saved


def group_workdirs(workdirs: list[str], labels: list[str] | None = None) -> list[Run]:
    """One :class:`Run` per workdir, in order; each (cell, seed) at most once."""
    if labels and len(labels) != len(workdirs):
        raise ConfigError(f"{len(labels)} --label for {len(workdirs)} --workdir; give one label per workdir "
                          "(the same label for the seeds of one cell) or none")
    paths = [Path(os.path.abspath(w)) for w in workdirs]
    in_grid = [bool(_SEED_DIR.fullmatch(p.name)) for p in paths]
    plain = iter(workdir_labels([w for w, g in zip(workdirs, in_grid) if not g]))
    cells = list(labels) if labels else [p.parent.name if g else next(plain) for p, g in zip(paths, in_grid)]
    runs, seen = [], {}
    for cell, workdir in zip(cells, workdirs):
        run = Run(cell, seed_of(workdir), workdir)
        if (cell, run.seed) in seen:
            raise ConfigError(f"two workdirs for cell {cell!r} seed {run.seed}: {seen[cell, run.seed]!r} and "
                              f"{workdir!r}; give each seed of a cell once (--label names the cell)")
        seen[cell, run.seed] = workdir
        runs.append(run)
    return runs


def find_runs(runs_dir: str, cells: list[str] | None = None, seeds: int | None = None) -> list[Run]:
    """The runs of a grid's output directory (``runs_dir/runs/<cell>/seed<s>``; ``runs_dir`` may also be
    that ``runs`` directory): the given ``cells`` (default: all, sorted), seeds ``0..seeds-1`` (default:
    every ``seed<s>`` directory of the cell)."""
    root = Path(runs_dir)
    root = root / "runs" if (root / "runs").is_dir() else root
    found = {}
    if root.is_dir():
        for cell_dir in sorted(root.iterdir()):
            if cell_dir.is_dir():
                ss = sorted(int(m.group(1)) for d in cell_dir.iterdir()
                            if d.is_dir() and (m := _SEED_DIR.fullmatch(d.name)))
                if ss:
                    found[cell_dir.name] = ss
    if not found:
        raise ConfigError(f"--runs {runs_dir!r}: no <cell>/seed<s> run directories under {str(root)!r}; "
                          "give a grid's output directory (OUT/runs/<cell>/seed<s>)")
    for cell in cells or []:
        if cell not in found:
            raise ConfigError(unknown("cell", cell, found) + f" (cells with runs under {str(root)!r})")
    runs = []
    for cell in cells or sorted(found):
        wanted = list(range(seeds)) if seeds else found[cell]
        missing = [s for s in wanted if s not in found[cell]]
        if missing:
            raise ConfigError(f"cell {cell!r} has no run of seed {', '.join(map(str, missing))} under "
                              f"{str(root)!r} (it has {', '.join(map(str, found[cell]))}); lower --seeds")
        runs += [Run(cell, s, str(root / cell / f"seed{s}")) for s in wanted]
    for run in runs:
        seed_of(run.workdir)  # the directory name and config.json agree
    return runs


def parse_compare(text: str) -> tuple[str, str]:
    """``better:worse`` -> (better, worse)."""
    better, sep, worse = text.partition(":")
    if not sep or not better or not worse or ":" in worse or better == worse:
        raise ConfigError(f"--compare {text!r}: give two different cells as BETTER:WORSE, e.g. meki:baseline "
                          "(the paper: BETTER has the lower KL at every layer)")
    return better, worse


def check_compare(pairs: list[tuple[str, str]], cells: list[str]) -> None:
    for pair in pairs:
        for cell in pair:
            if cell not in cells:
                raise ConfigError(f"--compare {':'.join(pair)}: " + unknown("cell", cell, cells))


def by_cell(runs: list[Run], results: list[dict]) -> dict[str, dict[int, dict]]:
    """cell -> seed -> result (``kl``, ``kl_reverse`` per layer), cells in order of appearance;
    every seed of a cell must have the same number of layers."""
    out: dict[str, dict[int, dict]] = {}
    for run, result in zip(runs, results):
        out.setdefault(run.cell, {})[run.seed] = result
    for cell, seeds in out.items():
        depths = {len(r["kl"]) for r in seeds.values()}
        if len(depths) > 1:
            raise ConfigError(f"cell {cell!r}: its seeds have {sorted(depths)} layers; a cell's runs must be "
                              "the same model (give the others their own --label)")
    return out


def layer_stats(seeds: dict[int, dict], key: str) -> list[Stat]:
    """Per layer, then the mean over layers: mean ± sample std over the seeds."""
    values = [r[key] for _, r in sorted(seeds.items())]
    per_layer = [stat([float(v[i]) for v in values]) for i in range(len(values[0]))]
    return per_layer + [stat([sum(map(float, v)) / len(v) for v in values])]


def compare(cells: dict[str, dict[int, dict]], better: str, worse: str) -> Comparison:
    a, b = cells[better], cells[worse]
    seeds = tuple(sorted(set(a) & set(b)))
    layers = min(len(next(iter(a.values()))["kl"]), len(next(iter(b.values()))["kl"])) - 1
    tests = {key: [verdicts.Pair(better, worse, verdicts.paired_t(
        [float(b[s][key][i]) - float(a[s][key][i]) for s in seeds])) for i in range(layers)]
        for key, _, _ in DIRECTIONS}
    return Comparison(better, worse, seeds, layers, tests)


def headline(c: Comparison) -> str:
    """``meki < baseline: early||final 0 agree, 3 disagree, 0 within noise; final||early ... over layers
    0-2, 3 seeds``."""
    if c.layers <= 0:
        return f"{c.better} < {c.worse}: no layer before the last to test"
    parts = "; ".join(f"{short} {verdicts.headline(c.tests[key])}" for key, _, short in DIRECTIONS)
    layers = "layer 0" if c.layers == 1 else f"layers 0-{c.layers - 1}"
    return f"{c.better} < {c.worse}: {parts} over {layers}, {len(c.seeds)} seed{'s' * (len(c.seeds) != 1)}"


def markdown(runs: list[Run], results: list[dict], comparisons: list[Comparison]) -> str:
    cells = by_cell(runs, results)
    lines = ["# LogitLens: KL between each layer's early exit and the final output", "",
             "Each layer's output through the final norm + LM head (MeKi §5.5, Fig. 7); nats, mean over "
             "validation tokens, in both directions (the paper does not say which). Layer i is the residual "
             "stream after `layers_i`, memory branches included; the last layer is the model output (KL 0); "
             "`mean` is over layers. Per cell: mean ± sample std over its seeds.", ""]
    lines += [f"- **{r.cell}** seed {r.seed}: `{r.workdir}`, step {res['step']}, {res['tokens']} tokens"
              for r, res in zip(runs, results)]
    heads = [f"{c} ({len(s)} seed{'s' * (len(s) != 1)})" for c, s in cells.items()]
    for key, title, _ in DIRECTIONS:
        stats = {c: layer_stats(s, key) for c, s in cells.items()}
        depth = max(len(v) for v in stats.values()) - 1
        lines += ["", f"## {title}", "", "| layer | " + " | ".join(heads) + " |", "|---:|" + "---:|" * len(heads)]
        for i in range(depth):
            lines.append(f"| {i} | " + " | ".join(format_stat(v[i]) if i < len(v) - 1 else "" for v in stats.values())
                         + " |")
        lines.append("| mean | " + " | ".join(format_stat(v[-1]) for v in stats.values()) + " |")
    if comparisons:
        lines += ["", f"## The paper's claim: lower KL at every layer (paired t-test over seeds, "
                      f"α = {verdicts.ALPHA:g})", "",
                  "Per layer, d_s = KL(worse, seed s) − KL(better, seed s) on the seeds both cells have "
                  "(d > 0: ours agrees with the paper on that seed); "
                  f"{100 * (1 - verdicts.ALPHA):g}% t interval of the mean d; the last layer (KL 0) is left out.",
                  ""]
        lines += [f"- {headline(c)}" for c in comparisons]
        for c in comparisons:
            for key, title, _ in DIRECTIONS:
                lines += ["", f"### {c.better} < {c.worse}: {title}", "",
                          "| layer | n | mean d | interval | p | verdict |", "|---:|---:|---:|---:|---:|---|"]
                for i, pair in enumerate(c.tests[key]):
                    t = pair.test
                    lines.append(f"| {i} | {t.n} | {format_number(t.mean)} | {format_ci(t.ci)} | {format_p(t.p)} "
                                 f"| {t.verdict} |")
    return "\n".join(lines) + "\n"


def _raw(x) -> str:
    return "" if x is None else repr(float(x))


def stats_csv(runs: list[Run], results: list[dict]) -> str:
    """One row per cell, direction and layer (then ``mean``): seeds, mean, std and every seed's value."""
    cells = by_cell(runs, results)
    all_seeds = sorted({r.seed for r in runs})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["cell", "direction", "layer", "n_seeds", "mean", "std"] + [f"seed{s}" for s in all_seeds])
    for cell, seeds in cells.items():
        for key, _, short in DIRECTIONS:
            stats = layer_stats(seeds, key)
            for i, st in enumerate(stats):
                last = i == len(stats) - 1
                vals = [(sum(seeds[s][key]) / len(seeds[s][key]) if last else seeds[s][key][i])
                        if s in seeds else None for s in all_seeds]
                w.writerow([cell, short, "mean" if last else i, st.n, _raw(st.mean), _raw(st.std)]
                           + [_raw(v) for v in vals])
    return buf.getvalue()


def pairs_csv(comparisons: list[Comparison]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["better", "worse", "direction", "layer", "n", "mean_diff", "ci_low", "ci_high", "p", "verdict"])
    for c in comparisons:
        for key, _, short in DIRECTIONS:
            for i, pair in enumerate(c.tests[key]):
                t = pair.test
                ci = t.ci or (None, None)
                w.writerow([c.better, c.worse, short, i, t.n, _raw(t.mean), _raw(ci[0]), _raw(ci[1]), _raw(t.p),
                            t.verdict])
    return buf.getvalue()


def compare_all(runs: list[Run], results: list[dict], pairs: list[tuple[str, str]]) -> list[Comparison]:
    """A :class:`Comparison` per ``(better, worse)`` pair of cells."""
    cells = by_cell(runs, results)
    check_compare(pairs, list(cells))
    return [compare(cells, better, worse) for better, worse in pairs]


def write_tables(runs: list[Run], results: list[dict], comparisons: list[Comparison], out: str) -> dict:
    """``out/logit_lens.md`` and ``.csv`` (and ``logit_lens_pairs.csv`` with comparisons); returns the paths."""
    paths = {"md": os.path.join(out, "logit_lens.md"), "csv": os.path.join(out, "logit_lens.csv")}
    write_text_atomic(paths["md"], markdown(runs, results, comparisons))
    write_text_atomic(paths["csv"], stats_csv(runs, results))
    if comparisons:
        paths["pairs"] = os.path.join(out, "logit_lens_pairs.csv")
        write_text_atomic(paths["pairs"], pairs_csv(comparisons))
    return paths
