"""LogitLens over seeds on fixed per-seed results: grouping by (cell, seed), mean ± std per layer, the
paired verdicts per layer (no model is trained here; test_logit_lens.py runs the whole command)."""
import csv
import io
import json
import math

import pytest
from scipy import stats

from edge_jax.errors import ConfigError
from edge_jax.papers.meki.logit_lens_seeds import (
    Run,
    by_cell,
    compare_all,
    find_runs,
    group_workdirs,
    headline,
    layer_stats,
    markdown,
    pairs_csv,
    parse_compare,
    stats_csv,
    write_tables,
)


def make_run(path, seed):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"seed": seed, "model": {"n_layers": 4}}))
    return str(path)


@pytest.fixture
def grid(tmp_path):
    """A grid's output directory: baseline seeds 0-2, meki seeds 0-1, and the lock files a grid leaves."""
    for cell, seeds in (("baseline", (0, 1, 2)), ("meki", (0, 1))):
        for s in seeds:
            make_run(tmp_path / "g" / "runs" / cell / f"seed{s}", s)
            (tmp_path / "g" / "runs" / cell / f"seed{s}.lock").write_text("")
    return tmp_path / "g"


def test_group_workdirs_by_cell_and_seed(grid, tmp_path):
    runs_dir = grid / "runs"
    workdirs = [str(runs_dir / c / f"seed{s}") for c, s in (("meki", 1), ("baseline", 0), ("meki", 0))]
    plain = make_run(tmp_path / "other" / "tiny", 4)
    runs = group_workdirs(workdirs + [plain])
    assert runs == [Run("meki", 1, workdirs[0]), Run("baseline", 0, workdirs[1]), Run("meki", 0, workdirs[2]),
                    Run("tiny", 4, plain)]
    # labels name the cells: two plain workdirs of seeds 1 and 2 become one cell
    a, b = make_run(tmp_path / "a", 1), make_run(tmp_path / "b", 2)
    assert group_workdirs([a, b], ["dense", "dense"]) == [Run("dense", 1, a), Run("dense", 2, b)]
    with pytest.raises(ConfigError, match="two workdirs for cell 'dense' seed 1"):
        group_workdirs([a, a], ["dense", "dense"])
    with pytest.raises(ConfigError, match="two workdirs for cell 'meki' seed 0"):
        group_workdirs([workdirs[2], workdirs[2]])
    with pytest.raises(ConfigError, match="1 --label for 2 --workdir"):
        group_workdirs([a, b], ["dense"])
    bad = make_run(tmp_path / "x" / "seed3", 5)
    with pytest.raises(ConfigError, match="named seed3 but its config.json has seed 5"):
        group_workdirs([bad])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no seed<s> directory name"):
        group_workdirs([str(tmp_path / "empty")])


def test_find_runs(grid):
    runs = find_runs(str(grid))
    assert [(r.cell, r.seed) for r in runs] == [("baseline", 0), ("baseline", 1), ("baseline", 2),
                                                 ("meki", 0), ("meki", 1)]
    assert runs[4].workdir == str(grid / "runs" / "meki" / "seed1")
    assert find_runs(str(grid / "runs"), ["meki", "baseline"], 2) == [
        Run(c, s, str(grid / "runs" / c / f"seed{s}")) for c in ("meki", "baseline") for s in (0, 1)]
    with pytest.raises(ConfigError, match="cell 'meki' has no run of seed 2 .*it has 0, 1"):
        find_runs(str(grid), seeds=3)
    with pytest.raises(ConfigError, match="unknown cell 'mek'; did you mean 'meki'"):
        find_runs(str(grid), ["mek"])
    with pytest.raises(ConfigError, match="no <cell>/seed<s> run directories"):
        find_runs(str(grid / "runs" / "meki" / "seed0"))


def test_parse_compare():
    assert parse_compare("meki:baseline") == ("meki", "baseline")
    for bad in ("meki", "meki:", ":baseline", "meki:meki", "a:b:c"):
        with pytest.raises(ConfigError, match="BETTER:WORSE"):
            parse_compare(bad)


# per seed, 4 layers (the last the model output, KL 0)
BASE = {0: [0.9, 0.3, 0.1, 0.0], 1: [1.2, 0.5, 0.2, 0.0], 2: [0.6, 0.4, 0.15, 0.0]}


def result(kl, reverse=None):
    return {"workdir": "w", "step": 200, "tokens": 1000, "kl": kl, "kl_reverse": reverse or [2 * v for v in kl]}


def test_layer_stats_by_hand():
    cells = by_cell([Run("baseline", s, f"b{s}") for s in BASE], [result(v) for v in BASE.values()])
    got = layer_stats(cells["baseline"], "kl")
    # layer 0: mean 0.9, deviations 0, +0.3, -0.3 -> sample std sqrt(0.18 / 2) = 0.3
    # layer 1: mean 0.4, deviations -0.1, +0.1, 0 -> 0.1; layer 2: mean 0.15 -> 0.05; layer 3: all 0
    # mean over layers per seed: 0.325, 0.475, 0.2875 -> mean 0.3625, std sqrt(0.0196875 / 2)
    expected = [(0.9, 0.3), (0.4, 0.1), (0.15, 0.05), (0.0, 0.0), (0.3625, math.sqrt(0.0196875 / 2))]
    assert [s.n for s in got] == [3] * 5
    for s, (mean, std) in zip(got, expected):
        assert s.mean == pytest.approx(mean, abs=1e-12) and s.std == pytest.approx(std, abs=1e-12)
    reverse = layer_stats(cells["baseline"], "kl_reverse")
    assert reverse[0].mean == pytest.approx(1.8) and reverse[0].std == pytest.approx(0.6)
    rows = list(csv.DictReader(io.StringIO(stats_csv([Run("baseline", s, f"b{s}") for s in BASE],
                                                     [result(v) for v in BASE.values()]))))
    assert len(rows) == 2 * 5
    assert rows[1]["layer"] == "1" and rows[1]["direction"] == "early||final" and rows[1]["n_seeds"] == "3"
    assert float(rows[1]["std"]) == pytest.approx(0.1) and float(rows[1]["seed1"]) == 0.5
    assert rows[4]["layer"] == "mean" and float(rows[4]["seed2"]) == pytest.approx(0.2875)
    one = layer_stats({0: result(BASE[0])}, "kl")
    assert one[0].mean == 0.9 and one[0].std is None, "one seed: no spread"


def test_layer_stats_refuses_mixed_depths():
    with pytest.raises(ConfigError, match="cell 'a': its seeds have \\[3, 4\\] layers"):
        by_cell([Run("a", 0, "x"), Run("a", 1, "y")], [result([0.1, 0.2, 0.0]), result([0.1, 0.2, 0.3, 0.0])])


def runs_and_results(better: dict, worse: dict):
    runs = [Run("meki", s, f"m{s}") for s in better] + [Run("baseline", s, f"b{s}") for s in worse]
    return runs, [result(v) for v in better.values()] + [result(v) for v in worse.values()]


def test_paired_verdicts_agree_and_disagree():
    # meki below the baseline on every seed and layer by 0.3 ± 0.02 (layer 0), 0.1 ± 0.01, 0.05 ± 0.01
    lower = {s: [BASE[s][0] - (0.28, 0.30, 0.32)[s], BASE[s][1] - (0.09, 0.10, 0.11)[s],
                 BASE[s][2] - (0.04, 0.05, 0.06)[s], 0.0] for s in BASE}
    runs, results = runs_and_results(lower, BASE)
    (c,) = compare_all(runs, results, [("meki", "baseline")])
    assert c.seeds == (0, 1, 2) and c.layers == 3
    tests = [p.test for p in c.tests["kl"]]
    assert [t.verdict for t in tests] == ["agree"] * 3
    assert [t.mean for t in tests] == pytest.approx([0.3, 0.1, 0.05])
    # layer 0 by hand: d = 0.28, 0.30, 0.32; sd 0.02, t = 0.3 / (0.02 / sqrt 3), two-sided p on 2 df
    t0 = 0.3 / (0.02 / math.sqrt(3))
    assert tests[0].p == pytest.approx(2 * stats.t.sf(t0, 2), rel=1e-6)
    half = stats.t.ppf(0.975, 2) * 0.02 / math.sqrt(3)
    assert tests[0].ci == pytest.approx((0.3 - half, 0.3 + half))
    # the reverse direction is 2 x KL here: twice the differences, the same t
    assert [p.test.mean for p in c.tests["kl_reverse"]] == pytest.approx([0.6, 0.2, 0.1])
    assert headline(c) == ("meki < baseline: early||final 3 agree, 0 disagree, 0 within noise; "
                           "final||early 3 agree, 0 disagree, 0 within noise over layers 0-2, 3 seeds")
    # swapped: the same differences negated
    (r,) = compare_all(runs, results, [("baseline", "meki")])
    assert [p.test.verdict for p in r.tests["kl"]] == ["disagree"] * 3
    assert [p.test.mean for p in r.tests["kl"]] == pytest.approx([-0.3, -0.1, -0.05])
    assert headline(r).startswith("baseline < meki: early||final 0 agree, 3 disagree, 0 within noise;")
    rows = list(csv.DictReader(io.StringIO(pairs_csv([c, r]))))
    assert len(rows) == 2 * 2 * 3
    assert (rows[0]["better"], rows[0]["worse"], rows[0]["direction"], rows[0]["layer"], rows[0]["verdict"]) == (
        "meki", "baseline", "early||final", "0", "agree")
    assert float(rows[0]["mean_diff"]) == pytest.approx(0.3) and float(rows[0]["p"]) == pytest.approx(tests[0].p)
    assert rows[6]["verdict"] == "disagree" and float(rows[6]["ci_high"]) < 0


def test_paired_verdicts_noise_and_missing_seeds():
    # differences +0.1, -0.1, +0.05 at layer 0: within noise; meki lacks seed 2, so n = 2 for every layer
    mixed = {0: [0.8, 0.3, 0.1, 0.0], 1: [1.3, 0.5, 0.2, 0.0]}
    runs, results = runs_and_results(mixed, BASE)
    (c,) = compare_all(runs, results, [("meki", "baseline")])
    assert c.seeds == (0, 1)
    t0 = c.tests["kl"][0].test
    assert t0.n == 2 and t0.verdict == "within noise" and t0.mean == pytest.approx(0.0)
    # layer 1 and 2: identical values, d = 0 on both seeds: a tie, within noise
    assert [p.test.verdict for p in c.tests["kl"][1:]] == ["within noise"] * 2
    one = [Run("meki", 0, "m0"), Run("baseline", 0, "b0")]
    (c1,) = compare_all(one, [result(mixed[0]), result(BASE[0])], [("meki", "baseline")])
    assert {p.test.verdict for p in c1.tests["kl"]} == {"n/a"}
    assert headline(c1).endswith("3 n/a (fewer than 2 paired seeds) over layers 0-2, 1 seed")
    with pytest.raises(ConfigError, match="--compare meki:dense: unknown cell 'dense'"):
        compare_all(runs, results, [("meki", "dense")])


def test_write_tables(tmp_path):
    lower = {s: [v - 0.2 * (i < 3) + 0.01 * s * (i < 3) for i, v in enumerate(BASE[s])] for s in BASE}
    runs, results = runs_and_results(lower, BASE)
    comparisons = compare_all(runs, results, [("meki", "baseline")])
    paths = write_tables(runs, results, comparisons, str(tmp_path / "out"))
    assert sorted(paths) == ["csv", "md", "pairs"]
    md = (tmp_path / "out" / "logit_lens.md").read_text()
    assert md == markdown(runs, results, comparisons)
    assert "| layer | meki (3 seeds) | baseline (3 seeds) |" in md
    # meki layer 0: 0.70, 1.01, 0.42 -> mean 0.71, std sqrt((0.01² + 0.30² + 0.29²) / 2) = 0.2951
    assert "| 0 | 0.7100 ± 0.2951 | 0.9000 ± 0.3000 |" in md
    assert "- " + headline(comparisons[0]) in md
    # d = 0.20, 0.19, 0.18: mean 0.19, sd 0.01, t = 32.9 on 2 df, interval ± 4.303 * 0.01 / sqrt 3
    assert "| 0 | 3 | 0.19 | [0.1652, 0.2148] | 9.2e-04 | agree |" in md
    assert sorted(write_tables(runs, results, [], str(tmp_path / "plain"))) == ["csv", "md"]
    assert "paired t-test" not in (tmp_path / "plain" / "logit_lens.md").read_text()
