"""NPUMoE's doc-block kinds (edge_jax/papers/npumoe/docs.py) on the committed records and benchmark files."""
import statistics
from pathlib import Path

import pytest

from edge_jax import plugins
from edge_jax.docgen import blocks, sources

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def src():
    plugins.load()
    return sources.Sources(REPO)


def _fill(src, spec: str) -> str:
    text, _ = blocks.fill(f"<!-- edge-jax docs: {spec} -->?<!-- /edge-jax docs -->", src)
    return text.split("-->", 1)[1].rsplit("<!--", 1)[0]


def test_speedup_is_the_ratio_of_the_means(src):
    ms = {c: statistics.fmean(src.per_seed("npumoe_group_capacity", c, "moe/ms_per_token").values())
          for c in ("g1_c32", "g8_c32")}
    assert _fill(src, "npumoe.speedup npumoe_group_capacity g8_c32 g1_c32") == f"{ms['g1_c32'] / ms['g8_c32']:.2f}"


def test_verdicts_count_the_tables_pairs(src):
    t = src.table("npumoe_chunk")
    assert len(t.pairs) == 6
    counts = _fill(src, "npumoe.verdicts npumoe_chunk").split(" / ")
    assert sum(int(c.split()[0]) for c in counts) == 6
    # the capacity filter keeps only the pairs from capacity 64 above 32: 3 group sizes x 3
    sub = _fill(src, "npumoe.verdicts npumoe_group_capacity_fallback 64 32")
    assert sum(int(c.split()[0]) for c in sub.split(" / ")) == 9
    assert _fill(src, "npumoe.lean npumoe_group_capacity_fallback 64 32").endswith(" of 9")


def test_slower_names_the_seeds(src):
    a = src.per_seed("npumoe_ablation", "all", "moe/ms_per_token")
    b = src.per_seed("npumoe_ablation", "tiers_grouping", "moe/ms_per_token")
    want = [s for s in sorted(a) if a[s] > b[s]]
    got = _fill(src, "npumoe.slower npumoe_ablation all tiers_grouping").replace(" and ", ", ").split(", ")
    assert [int(s) for s in got] == want


def test_headline_is_one_table_cell_from_the_records(src):
    text = _fill(src, "npumoe.headline")
    assert "\n" not in text and "|" not in text
    drop = src.per_seed("npumoe_accuracy", "c128_saliency", "moe/drop_pct").values()
    assert f"{statistics.fmean(drop):.2f} ± {statistics.stdev(drop):.2f}%" in text
    bench = src.json("results/npumoe_bench/bench.json")["result"]["speedup_vs_base"]["+residency"]
    assert text.startswith(f"all of Fig. 17's steps {bench:.2f}×")


def test_sweep_without_a_sweep_is_one_line(src):
    with pytest.raises(blocks.DocBlockError) as e:
        _fill(src, "npumoe.sweep results/npumoe_bench/bench.json")
    assert "has no Table 5 sweep" in str(e.value) and "\n" not in str(e.value)
