"""PLM's doc block kinds and record notes on the committed records (edge_jax/papers/plm/docs.py, grid.py)."""
import copy
import json
from pathlib import Path

import pytest

from edge_jax.docgen.blocks import DocBlockError
from edge_jax.docgen.sources import Sources
from edge_jax.papers.plm import docs, grid
from edge_jax.registry import DOC_BLOCKS

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def src():
    return Sources(ROOT)


def _records(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "results" / name / "records").glob("*.json"))]


def test_record_notes_say_what_the_records_scored():
    records = _records("plm_schedule")
    text = grid.record_notes(None, records)
    assert text.startswith(f"{len(records)} records, trained 300 steps of 16 x 128 tokens.")
    assert "eval.limit=400: code_cloze the first 400 (of up to 1,000), longctx_mc all (200)" in text
    mixed = copy.deepcopy(records)
    mixed[0]["config"]["eval"]["limit"] = 0
    mixed[1]["metrics"]["steps"] = 200
    text = grid.record_notes(None, mixed)
    assert "with eval.limit=0: code_cloze all (up to 1,000), longctx_mc all (200)" in text
    assert "300 in 8, 200 in 1" in text


def test_headline_is_one_table_cell_from_the_results(src):
    text = DOC_BLOCKS.get("plm.headline")(src)
    assert "\n" not in text and "|" not in text
    bench = src.json(docs.BENCH)["result"]["contexts"]["8192"]["round_ratio"]["absorbed_vs_naive"]
    assert f"decodes {bench:.2f}× faster than naive at 8K (2-core CPU" in text
    assert text.startswith("1.8255B parameters (paper 1.83B); 576 vs 4,096 cached values per token and layer (0.1406)")


def test_markdown_cells_and_pairs(src, tmp_path):
    (tmp_path / "t.md").write_text("# x\n\ntext\n\n| cell | a (b) | c |\n|---|---:|---:|\n| one | 1,234.5 (0.5) | x |\n"
                                   "| two | 10 | 2e-3 |\n\nmore\n")
    local = Sources(tmp_path)
    assert docs.md(local, "t.md", "one", "a (b)", fmt=",.1f") == "1,234.5"
    assert docs.md_ratio(local, "t.md", "one", "two", "a (b)") == "123.45"
    with pytest.raises(DocBlockError, match="holds no number"):
        docs.md(local, "t.md", "one", "c")
    with pytest.raises(DocBlockError, match="no table row 'three'"):
        docs.md(local, "t.md", "three", "c")
    assert docs.pair(src, "plm_attention", "mla", "gqa", "p") == "0.036"
    with pytest.raises(DocBlockError, match="no paper claim gqa > mla"):
        docs.pair(src, "plm_attention", "gqa", "mla", "p")
    assert docs.compile_span(src, "est. time for budget", "sum") == "75.2 d"
