"""MeKi's doc blocks and table notes, on the committed records (edge_jax.papers.meki.docs / notes)."""
import pytest

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources
from edge_jax.papers.meki import docs
from edge_jax.papers.meki.notes import docs_scored, record_notes


@pytest.fixture(scope="module")
def src():
    return Sources(".")


def test_docs_scored_is_the_common_denominator():
    assert docs_scored([3 / 776, 190 / 776, 11 / 776]) == 776
    assert docs_scored([0.5, 0.25]) == 4
    assert docs_scored([0.1234567]) is None or docs_scored([0.1234567]) > 1000


def test_record_notes_state_what_the_records_scored(src):
    t = src.table("meki_main")
    text = record_notes(t.grid, t.records)
    assert "code_cloze 776" in text and "facts_mc 180" in text and "longctx_mc 200" in text
    assert "eval.limit 0" in text and "seeds 0, 1, 2, 3, 4, 5, 6, 7" in text
    assert "1,000" not in text


def test_pair_test_matches_the_grid_table(src):
    t = src.table("meki_main")
    pair = next(p for p in t.pairs if (p.better, p.worse) == ("meki", "baseline"))
    ours = docs.pair_test(src, "meki_main", "meki", "baseline", "zero_shot_avg")
    assert ours.mean == pytest.approx(pair.test.mean) and ours.p == pytest.approx(pair.test.p)
    assert docs.test(src, "meki_main", "meki", "baseline", "zero_shot_avg", show="needed") == pair.test.needs_text
    with pytest.raises(DocBlockError, match="show="):
        docs.test(src, "meki_main", "meki", "baseline", "zero_shot_avg", show="nope")


def test_order_and_results_follow_the_means(src):
    text = docs.order(src, "meki_main", "val_loss")
    assert text.startswith("MeKi⁺ ") and text.endswith(" base 4.935") and " < " in text
    table = docs.results(src)
    assert table.count("\n") == len(docs.GRIDS) + 1 and "6 within noise" in table


def test_headline_fits_one_table_cell(src):
    text = docs.headline(src)
    assert "\n" not in text and "|" not in text
    assert "0.54 nats" in text and "paper 0.99" in text
