"""The expert cache's doc blocks and record notes on the committed records: the ratios they derive are the
per-seed ratios of the records, and the notes follow the records, not constants."""
import copy
import statistics
from pathlib import Path

import pytest

from edge_jax.docgen.sources import Sources
from edge_jax.papers.expert_cache import docs

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def src():
    return Sources(REPO)


def test_ratio_is_the_mean_of_per_seed_ratios(src):
    a = src.per_seed("cache_policies", "real-v20-watermark", "stall_ms_per_token")
    b = src.per_seed("cache_policies", "real-v20-lru", "stall_ms_per_token")
    want = statistics.fmean(a[s] / b[s] for s in a)
    assert docs.ratio(src, "real-v20-watermark", "real-v20-lru", std="no", fmt=".4f") == f"{want:.4f}"
    # a cell of another grid by grid/cell
    assert docs.ratio(src, "cache_sensitivity/default", "real-v20-watermark", std="no") == "1.00"


def test_gap_closed_lies_between_the_policies(src):
    assert 0 < float(docs.gap_closed(src, "real", "20")) < 100


def test_record_notes_follow_the_records(src):
    t = src.table("cache_policies")
    assert "one expert size" in docs.record_notes(t.grid, t.records)
    changed = copy.deepcopy(t.records)
    for r in changed:
        r["config"]["profile"]["size_spread"] = 0.5
        r["metrics"]["tokens"] = 1000
    note = docs.record_notes(t.grid, changed)
    assert "spread by 0.5" in note and "simulated 1,000 tokens" in note


def test_headline_is_one_table_cell(src):
    text = docs.headline(src)
    assert "\n" not in text and "|" not in text and "our goal ≤ 0.8×" in text
