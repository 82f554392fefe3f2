"""EdgeInfinite's doc blocks and record notes on the committed records: the counts they derive agree with
what the records hold, and a note about KV slots follows the records, not a constant."""
import copy
from pathlib import Path

import pytest

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources
from edge_jax.papers.edgeinfinite import docs

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def src():
    return Sources(REPO)


def test_answers_are_percent_times_prompts(src):
    records = [r for r in src.table("edgeinfinite_main").records if r["cell"] == "streamingllm"]
    # 30 prompts per seed at the paper's band: 5 tasks x 6 lengths x 1 example
    assert {docs.band_prompts(r) for r in records} == {30}
    want = sum(r["metrics"]["longctx/overall"] * 30 / 100 for r in records)
    assert docs.answers(src, "edgeinfinite_main", "streamingllm") == str(round(want))
    assert docs.prompts(src, "edgeinfinite_main", "streamingllm") == f"{30 * len(records):,}"


def test_kv_slots_and_record_notes_follow_the_records(src):
    t = src.table("edgeinfinite_main")
    slots = docs.peak_slots(t.records)
    assert slots["pyramidkv"] > slots["snapkv"] > t.records[0]["config"]["longctx"]["budget"]
    note = docs.record_notes(t.grid, t.records)
    assert f"pyramidkv {slots['pyramidkv']:,}" in note and "budget (longctx.budget) was 192" in note
    changed = copy.deepcopy(t.records)
    for r in changed:
        r["metrics"]["longctx/peak_cache_tokens"] = 7
    assert "pyramidkv 7" in docs.record_notes(t.grid, changed)


def test_pairs_and_lead_match_the_categories_report(src):
    assert docs.pairs(src, "edgeinfinite_main", "longctx/answer_nll") in (
        (REPO / "results/edgeinfinite_main/categories.md").read_text())
    text = docs.lead(src, "edgeinfinite_main", "edgeinfinite", "longctx/answer_nll")
    assert text.startswith("Δ ") and ", p ≤ " in text


def test_headline_is_one_table_cell(src):
    text = docs.headline(src)
    assert "\n" not in text and "|" not in text and "380.7 MiB" in text


def test_a_missing_bench_length_is_one_line(src):
    with pytest.raises(DocBlockError, match="no point at length 123"):
        docs.ttft_ratio(src, "123")
