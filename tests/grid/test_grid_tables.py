"""edge_jax.grid.tables and plots: summaries, ranks, ordering agreement, files."""
import csv
import dataclasses
import io
import math

import pytest

from edge_jax.grid import plots, spec, tables

SHA = "0123456789abcdef0123456789abcdef01234567"


def make_grid(values=None, order=None, higher=True, extra=("val_ppl",)):
    paper = {"metric": "avg accuracy", "higher_is_better": higher, "source": "Toy Table 2",
             "values": values if values is not None else {"a": 50.0, "b": 52.0, "c": 55.0}}
    if order is not None:
        paper["order"] = order
    return spec.validate_grid({
        "name": "toy", "title": "Toy Table 2: memory variants", "base": "x.py:tiny",
        "base_overrides": {}, "cells": {"a": {}, "b": {}, "c": {}},
        "metric": "val_loss", "lower_is_better": True, "extra_metrics": list(extra),
        "paper": paper, "notes": "Some notes.",
    }, preset="tiny", path="ablations/toy.py")


def rec(cell, seed, val, **kw):
    r = {"grid": "toy", "preset": "tiny", "cell": cell, "seed": seed,
         "metrics": {"val_loss": val, "val_ppl": math.exp(val)},
         "curve": [[0, val + 1.0], [10, val]],
         "git": {"commit": SHA, "dirty": False},
         "device": {"platform": "cpu", "device_kind": "cpu", "device_count": 1}}
    r.update(kw)
    return r


def agreeing_records():
    # paper: c (55) > b (52) > a (50); ours (lower loss is better): c < b < a
    return [rec("a", 0, 3.0), rec("a", 1, 3.2), rec("b", 0, 2.9), rec("b", 1, 2.95),
            rec("c", 0, 2.7), rec("c", 1, 2.8)]


def test_stat_and_kendall():
    s = tables.stat([3.0, 3.2])
    assert s.n == 2 and s.mean == pytest.approx(3.1) and s.std == pytest.approx(math.sqrt(0.02))
    assert tables.stat([1.0]).std is None and tables.stat([]).mean is None
    assert tables.kendall_tau_b([1, 2, 3], [1, 2, 3]) == 1.0
    assert tables.kendall_tau_b([1, 2, 3], [3, 2, 1]) == -1.0
    assert tables.kendall_tau_b([2, 1, 3], [1, 2, 3]) == pytest.approx(1 / 3)
    assert tables.kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert tables.kendall_tau_b([1, 1], [1, 2]) is None


def test_competition_ranks():
    assert tables.competition_ranks({"a": 2.0, "b": 1.0, "c": 2.0}, True) == {
        "b": 1, "a": 2, "c": 2}
    assert tables.competition_ranks({"a": 2.0, "b": float("nan"), "c": 3.0}, False) == {
        "c": 1, "a": 2, "b": 3}


def test_agreeing_table():
    t = tables.build_table(make_grid(), agreeing_records(), seeds=2)
    rows = {r.cell: r for r in t.rows}
    assert [r.cell for r in t.rows] == ["a", "b", "c"]          # grid order, not rank order
    assert (rows["c"].our_rank, rows["c"].paper_rank) == (1, 1)
    assert (rows["a"].our_rank, rows["a"].paper_rank) == (3, 3)
    assert t.agreement.agrees is True and t.agreement.tau == 1.0
    md = tables.markdown(t)
    assert md.startswith("# Toy Table 2: memory variants\n")
    assert "preset `tiny`" in md and "seeds 0, 1" in md and f"`{SHA[:12]}`" in md
    assert "Paper metric: avg accuracy, higher is better (Toy Table 2)" in md
    assert "Ours: `val_loss`, lower is better, mean ± std over seeds" in md
    assert "| cell | n | `val_loss` | `val_ppl` | paper: avg accuracy | rank (ours) | rank (paper) |" in md
    assert "| a | 2 | 3.100 ± 0.141 |" in md
    assert "| 50 | 3 | 3 |" in md
    # two seeds: every difference agrees in sign, none is significant (t = 7 or 2.3 on 1 df)
    assert ("**Paper's ordered pairs: 0 agree, 0 disagree, 3 within noise** (paired t-test over seeds, two-sided "
            "α = 0.05); Kendall τ = 1.00 over 3 cells (of the seed means). "
            "Paper: c > b > a; ours (means): c > b > a.") in md
    assert "| c > b | 2 | 0.175 | [-0.1427, 0.4927] | 0.090 | within noise |" in md
    assert "Missing" not in md and "Notes: Some notes." in md and "(curves.png)" in md
    evaluation_only = [dict(r, curve=[]) for r in agreeing_records()]  # cells that only evaluate
    assert "curves.png" not in tables.markdown(tables.build_table(make_grid(), evaluation_only, seeds=2))


def test_disagreeing_table():
    records = [rec("a", 0, 2.5), rec("b", 0, 2.9), rec("c", 0, 2.7)]  # ours: a > c > b
    t = tables.build_table(make_grid(), records, seeds=1)
    assert t.agreement.agrees is False
    assert t.agreement.discordant == 2 and t.agreement.ordered_pairs == 3
    assert t.agreement.tau == pytest.approx(-1 / 3)
    md = tables.markdown(t)
    assert ("**Paper's ordered pairs: 0 agree, 0 disagree, 0 within noise, 3 n/a (fewer than 2 paired seeds)**"
            in md and "Kendall τ = -0.33 over 3 cells (of the seed means). Paper: c > b > a; ours (means): "
            "a > c > b.") in md
    assert "| a | 1 | 2.500 |" in md     # one seed: no ± part


def test_our_tie_is_not_agreement():
    records = [rec("a", 0, 3.0), rec("b", 0, 2.0), rec("c", 0, 2.0)]
    t = tables.build_table(make_grid(), records)
    assert t.agreement.agrees is False and t.agreement.discordant == 1


def test_missing_cells_and_seeds_are_listed():
    records = [rec("a", 0, 3.0), rec("a", 1, 3.1), rec("b", 0, 2.9)]
    t = tables.build_table(make_grid(), records, seeds=2)
    md = tables.markdown(t)
    assert "Missing records: b (seed 1); c (seeds 0, 1)." in md
    assert "| c | 0 | — | — | 55 | — | — |" in md
    # c has no result, so ranks are over a and b only
    assert {r.cell: r.paper_rank for r in t.rows} == {"a": 2, "b": 1, "c": None}
    assert t.agreement.cells == ["b", "a"] and t.agreement.agrees is True


def test_not_comparable_and_ignored_records():
    records = [rec("a", 0, 3.0), rec("b", 0, 2.0, preset="paper"), rec("zz", 0, 1.0)]
    t = tables.build_table(make_grid(), records, seeds=1)
    md = tables.markdown(t)
    assert t.agreement.agrees is None and "Paper's ordered pairs: not comparable" in md
    assert "Ignored 2 record(s)" in md


def test_cells_without_paper_values_are_left_out_of_ranking():
    grid = make_grid(values={"a": 50.0, "c": 55.0, "b": None})
    t = tables.build_table(grid, agreeing_records(), seeds=2)
    assert {r.cell: (r.our_rank, r.paper_rank) for r in t.rows} == {
        "a": (2, 2), "b": (None, None), "c": (1, 1)}
    assert t.agreement.cells == ["c", "a"]


def test_order_only_paper():
    grid = make_grid(values={}, order=["c", "a", "b"])
    t = tables.build_table(grid, agreeing_records(), seeds=2)
    md = tables.markdown(t)
    assert "The paper gives an ordering without numbers" in md
    assert "Paper: c > a > b; ours (means): c > b > a." in md
    assert [p.name for p in t.pairs] == ["c>a", "c>b", "a>b"]


def test_csv_contents():
    t = tables.build_table(make_grid(), agreeing_records()[:-1], seeds=2)
    rows = list(csv.DictReader(io.StringIO(tables.csv_text(t))))
    assert list(rows[0]) == ["cell", "n_seeds", "seeds", "val_loss_mean", "val_loss_std",
                             "val_ppl_mean", "val_ppl_std", "paper_value", "paper_rank",
                             "our_rank", "missing_seeds"]
    a = rows[0]
    assert (a["cell"], a["n_seeds"], a["seeds"]) == ("a", "2", "0;1")
    assert float(a["val_loss_mean"]) == pytest.approx(3.1)
    assert float(a["val_loss_std"]) == pytest.approx(math.sqrt(0.02))
    assert (a["paper_value"], a["paper_rank"], a["our_rank"]) == ("50.0", "3", "3")
    c = rows[2]
    assert (c["n_seeds"], c["val_loss_std"], c["missing_seeds"]) == ("1", "", "1")


def test_write_tables_and_curves(tmp_path):
    grid = make_grid()
    tables.write_tables(grid, agreeing_records(), tmp_path, seeds=2)
    assert (tmp_path / "table.md").read_text().startswith("# Toy Table 2")
    assert (tmp_path / "table.csv").read_text().startswith("cell,n_seeds")
    pairs = list(csv.DictReader(io.StringIO((tmp_path / "pairs.csv").read_text())))
    assert [(r["better"], r["worse"], r["n"], r["verdict"]) for r in pairs] == [
        ("c", "b", "2", "within noise"), ("c", "a", "2", "within noise"), ("b", "a", "2", "within noise")]
    assert float(pairs[0]["mean_diff"]) == pytest.approx(0.175)
    assert float(pairs[0]["p"]) == pytest.approx(0.0903, abs=1e-3)
    path = plots.write_curves(grid, agreeing_records(), tmp_path)
    assert path.read_bytes()[:4] == b"\x89PNG"
    plots.write_curves(grid, [], tmp_path / "empty")      # no records: still a PNG
    assert (tmp_path / "empty" / "curves.png").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_seed_band_uses_the_seeds_present_at_each_step():
    steps, mean, lo, hi = plots.seed_band([[[0, 4.0], [10, 3.0]], [[0, 5.0], [20, 2.0]]])
    assert steps == [0, 10, 20]
    assert mean == [4.5, 3.0, 2.0] and lo == [4.0, 3.0, 2.0] and hi == [5.0, 3.0, 2.0]


def test_significant_disagreement_shows_the_written_reason_and_pairs_csv():
    grid = spec.validate_grid({
        "name": "toy", "title": "Toy", "base": "x.py:tiny", "base_overrides": {}, "cells": {"a": {}, "b": {}},
        "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
        "paper": {"metric": "acc", "higher_is_better": True, "source": "T", "values": {"a": 2.0, "b": 1.0}},
        "notes": "", "explanations": {"a>b": "b trains on more tokens"}}, preset="tiny", path="ablations/toy.py")
    # ours: b has the lower loss on every seed, by 0.5 +- 0.01: the paper's a > b is significantly reversed
    records = [rec("a", s, 3.0 + 0.01 * s) for s in range(3)] + [rec("b", s, 2.5 + 0.02 * s) for s in range(3)]
    t = tables.build_table(grid, records, seeds=3)
    assert [(p.name, p.test.verdict) for p in t.pairs] == [("a>b", "disagree")]
    md = tables.markdown(t)
    assert "**Paper's ordered pairs: 0 agree, 1 disagree, 0 within noise**" in md
    assert "| a > b | 3 | -0.49 | " in md and "| disagree: b trains on more tokens |" in md
    rows = list(csv.DictReader(io.StringIO(tables.pairs_csv(t))))
    assert rows[0]["better"] == "a" and rows[0]["verdict"] == "disagree" and float(rows[0]["mean_diff"]) < 0
    assert rows[0]["reason"] == "b trains on more tokens" and float(rows[0]["p"]) < 0.05
    unexplained = dataclasses.replace(grid, explanations={})
    assert "| disagree (no reason written) |" in tables.markdown(tables.build_table(unexplained, records))


def test_dirty_records_are_marked():
    records = agreeing_records()
    records[0] = dict(records[0], git={"commit": SHA, "dirty": True, "diff_sha256": "ab" * 32})
    md = tables.markdown(tables.build_table(make_grid(), records, seeds=2))
    assert f"`{SHA[:12]}` (dirty, diff sha256 `{'ab' * 6}`)" in md
    assert "**Made from a dirty working tree: not reproducible from the commit alone.**" in md
    assert "dirty" not in tables.markdown(tables.build_table(make_grid(), agreeing_records(), seeds=2))


def test_commands_are_listed_and_a_paper_tie_makes_no_claim():
    records = [dict(r, command="edge-jax grid ablations/toy.py --seeds 2") for r in agreeing_records()]
    md = tables.markdown(tables.build_table(make_grid(), records, seeds=2))
    assert "Made by `edge-jax grid ablations/toy.py --seeds 2`." in md
    assert "Made by" not in tables.markdown(tables.build_table(make_grid(), agreeing_records(), seeds=2))
    many = [dict(r, command=f"edge-jax grid ablations/toy.py --cell {k}") for k, r in enumerate(agreeing_records())]
    assert "--cell 2` and 3 other command(s)." in tables.markdown(tables.build_table(make_grid(), many, seeds=2))
    tied = tables.build_table(make_grid(values={"a": 50.0, "b": 50.0, "c": 50.0}), agreeing_records(), seeds=2)
    assert tied.pairs == [] and "**Paper's ordered pairs: none** (the paper ranks the 3 cells" in tables.markdown(tied)


def seeds_scored(grid, records):
    """A record_notes hook for the test: a fact the records hold."""
    return f"{len(records)} records, seeds {sorted({r['seed'] for r in records})}."


def test_record_notes_come_from_the_records():
    grid = dataclasses.replace(make_grid(), record_notes=f"{__name__}:seeds_scored")
    text = tables.markdown(tables.build_table(grid, agreeing_records()))
    assert "From the records: 6 records, seeds [0, 1]." in text
    fewer = tables.markdown(tables.build_table(grid, agreeing_records()[:3]))
    assert "From the records: 3 records, seeds [0, 1]." in fewer
    with pytest.raises(spec.GridSpecError, match="'record_notes' must be 'module:function'"):
        spec.validate_grid({**_raw(), "record_notes": "not a hook"}, preset="tiny")


def _raw():
    return {"name": "toy", "title": "t", "base": "x.py:tiny", "base_overrides": {}, "cells": {"a": {}, "b": {}},
            "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
            "paper": {"metric": "m", "higher_is_better": True, "source": "s", "values": {"a": 1.0, "b": 2.0}},
            "notes": ""}
