"""`edge-jax summary`: a row per ablation grid from its records."""
import json
import statistics
import textwrap

from edge_jax.cli import main
from edge_jax.grid import power
from edge_jax.grid.tables import format_number

GRID = '''
def get_grid(preset):
    if preset != "tiny":
        raise ValueError(f"unknown preset {{preset!r}}; valid presets: tiny")
    return {{
        "name": "{name}", "title": "Toy", "base": "fake.py:tiny", "base_overrides": {{}},
        "cells": {{"a": {{}}, "b": {{}}, "c": {{}}}}, "metric": "val_loss", "lower_is_better": True,
        "extra_metrics": [], "notes": "",
        "paper": {{"metric": "acc", "values": {{"a": 3.0, "b": 2.0, "c": 1.0}}, "higher_is_better": True,
                  "source": "T"}},
        "explanations": {{"b>c": "c saw more data"}},
    }}
'''
SHA = "0123456789abcdef0123456789abcdef01234567"


def write_records(out, values):
    (out / "records").mkdir(parents=True)
    for (cell, seed), v in values.items():
        rec = {"grid": out.name, "preset": "tiny", "cell": cell, "seed": seed, "metrics": {"val_loss": v},
               "git": {"commit": SHA, "dirty": False}}
        (out / "records" / f"{cell}__seed{seed}.json").write_text(json.dumps(rec))


def test_summary_counts_verdicts_and_prints_reasons(tmp_path, capsys):
    ablations, results = tmp_path / "ablations", tmp_path / "results"
    ablations.mkdir()
    for name in ("toy_a", "toy_b", "toy_c"):
        (ablations / f"{name}.py").write_text(textwrap.dedent(GRID.format(name=name)))
    # toy_a: a best on every seed (agrees twice); c better than b on every seed, against the paper
    write_records(results / "toy_a", {("a", s): 1.0 + 0.01 * s for s in range(3)}
                  | {("b", s): 2.0 + (0.1, -0.05, 0.02)[s] for s in range(3)}
                  | {("c", s): 1.5 + 0.02 * s for s in range(3)})
    # toy_c: one seed only, so no pair has two paired seeds
    write_records(results / "toy_c", {("a", 0): 1.0, ("b", 0): 2.0, ("c", 0): 3.0})
    assert main(["summary", "--ablations", str(ablations), "--results", str(results)]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    progress = [line for line in captured.err.splitlines() if line.startswith("edge-jax summary: ")]
    assert progress == [f"edge-jax summary: grid {i}/3: {ablations / name}.py"
                        for i, name in enumerate(("toy_a", "toy_b", "toy_c"), 1)]
    assert out[0] == ("| grid | cells | seeds | commit | agree | disagree | within noise | min. detectable Δ "
                      "| seeds the within-noise pairs need | Kendall τ | paper's orderings our seeds contradict "
                      "(α = 0.05) |")
    row_a = next(line for line in out if line.startswith("| [toy_a]"))
    cells = [c.strip() for c in row_a.split("|")[1:-1]]
    assert cells[1:7] == ["3", "3", f"`{SHA[:12]}`", "2", "1", "0"]
    assert cells[0] == f"[toy_a]({(results / 'toy_a').as_posix()}/table.md)"
    # the median pair's minimum detectable difference (the MDD grows with the spread: the median spread's);
    # no pair is within noise, so none needs more seeds
    spreads = sorted(statistics.stdev(d) for d in ([1.1, 0.94, 1.0], [0.5, 0.51, 0.52], [0.6, 0.43, 0.48]))
    assert cells[7] == format_number(power.min_detectable(spreads[1], 3, 0.05)) and cells[8] == "—"
    assert cells[10] == "paper says b > c: c saw more data"  # the paper's claim; our seeds put c above b
    row_c = [c.strip() for c in next(line for line in out if line.startswith("| [toy_c]")).split("|")[1:-1]]
    assert row_c[4:11] == ["0", "0", "0", "—", "—", "1.00", "none; 3 pair(s) n/a (fewer than 2 paired seeds)"]
    assert "| toy_b | | | | | | | | | | no records yet |" in out


def test_summary_lists_the_seeds_each_within_noise_pair_needs(tmp_path, capsys):
    """a vs b: mean 0.1, spread 0.1 (10 seeds at 80 % power); b vs c: no difference; a vs c: mean 0.1 spread 0.1."""
    ablations, results = tmp_path / "ablations", tmp_path / "results"
    ablations.mkdir()
    (ablations / "toy.py").write_text(textwrap.dedent(GRID.format(name="toy")))
    write_records(results / "toy", {("a", s): 1.0 + (0.1, -0.2, 0.1)[s] for s in range(3)}
                  | {("b", s): 1.1 + (0.0, -0.1, 0.1)[s] for s in range(3)}
                  | {("c", s): 1.1 + (0.0, -0.1, 0.1)[s] for s in range(3)})
    assert main(["summary", "--ablations", str(ablations), "--results", str(results)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| [toy]"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[4:7] == ["0", "0", "3"]
    assert cells[8] == f"{power.seeds_needed(0.1, 0.1, 0.05)} × 2, never" == "10 × 2, never"


def test_summary_lists_pairs_that_share_a_reason_once(tmp_path, capsys):
    """Paper a > b > c; ours the reverse on every seed: three disagreements, two of them with one reason."""
    ablations, results = tmp_path / "ablations", tmp_path / "results"
    ablations.mkdir()
    text = textwrap.dedent(GRID.format(name="toy")).replace(
        '{"b>c": "c saw more data"}', '{"a>c": "c is bigger", "b>c": "c is bigger"}')
    (ablations / "toy.py").write_text(text)
    write_records(results / "toy", {("a", s): 3.0 + 0.01 * s for s in range(3)}
                  | {("b", s): 2.0 + 0.02 * s for s in range(3)} | {("c", s): 1.0 + 0.03 * s for s in range(3)})
    assert main(["summary", "--ablations", str(ablations), "--results", str(results)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| [toy]"))
    assert row.split("|")[-2].strip() == ("paper says a > b: (no reason written); "
                                        "paper says a > c, b > c: c is bigger")


def test_summary_without_ablations_dir_is_one_line(tmp_path, capsys):
    assert main(["summary", "--ablations", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().out.strip().startswith("error: no ablations directory")
