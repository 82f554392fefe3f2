"""Generated blocks of README.md and docs/*.md (edge_jax.docgen): the committed ones are what the records
give, a hand edit is caught, and the markers' errors are one line."""
import json
from pathlib import Path

import pytest

from edge_jax import plugins
from edge_jax.docgen import blocks, command, sources

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def src():
    plugins.load()  # the papers' block kinds
    return sources.Sources(REPO)


def test_committed_blocks_are_what_the_records_give(src):
    paths = blocks.files(REPO)
    assert sum(len(blocks.find(p.read_text(), str(p))) for p in paths) >= 1
    stale = command.check_files(paths, src)
    assert not stale, "run `edge-jax docs`; these blocks differ from the records:\n" + "\n".join(
        f"{s.block.where} '{s.block.spec}': committed {s.block.body[:200]!r}, records give {s.want[:200]!r}"
        for s in stale)


def test_a_hand_edit_is_caught(src, tmp_path):
    readme = (REPO / "README.md").read_text()
    [summary] = [b for b in blocks.find(readme) if b.spec == "summary"]
    edited = readme[:summary.start] + summary.body.replace("| 8 |", "| 9 |", 1) + readme[summary.end:]
    assert edited != readme
    (tmp_path / "README.md").write_text(edited)
    [stale] = command.check_files([tmp_path / "README.md"], src)
    assert stale.block.spec == "summary" and stale.want == summary.body
    text, changed = blocks.fill(edited, src)
    assert text == readme and len(changed) == 1


def _toy_repo(tmp_path):
    """A repository with one toy grid and its records (two cells, three seeds) and a JSON benchmark file."""

    (tmp_path / "ablations").mkdir()
    (tmp_path / "ablations" / "toy.py").write_text(
        "def get_grid(preset):\n"
        "    return {'name': 'toy', 'title': 'Toy', 'base': 'configs/lm.py:size=tiny', 'base_overrides': {},\n"
        "            'cells': {'a': {}, 'b': {}}, 'metric': 'val_loss', 'lower_is_better': True,\n"
        "            'extra_metrics': [], 'notes': '',\n"
        "            'paper': {'metric': 'loss', 'values': {'a': 2.0, 'b': 1.0}, 'higher_is_better': False,\n"
        "                      'source': 'Table 1'}}\n")
    records = tmp_path / "results" / "toy" / "records"
    records.mkdir(parents=True)
    values = {"a": [3.0, 3.1, 3.3], "b": [2.5, 2.7, 2.6]}
    for cell, vals in values.items():
        for seed, v in enumerate(vals):
            (records / f"{cell}__seed{seed}.json").write_text(json.dumps(
                {"grid": "toy", "preset": "tiny", "cell": cell, "seed": seed, "metrics": {"val_loss": v},
                 "git": {"commit": "0" * 40, "dirty": False}}))
    (tmp_path / "results" / "bench.json").write_text(json.dumps({"cases": [{"ratio": 0.98123, "est. step": "1,958 ms"}],
        "provenance": {"device": {"platform": "cpu"}, "host": {"cpus": 2, "load_avg_1m": 0.19}}}))
    return sources.Sources(tmp_path)


@pytest.mark.parametrize("spec,want", [
    ("mean toy a val_loss", "3.133"),
    ("stat toy b val_loss", "2.600 ± 0.100"),
    ("stat toy b val_loss scale=-1 fmt=.2f", "-2.60 ± 0.10"),
    ("diff toy a b val_loss fmt=.2f", "0.53"),
    ("diff toy a b val_loss scale=100 fmt=.0f", "53"),
    ("seeds toy", "3"),
    ("p toy a b val_loss", "0.026"),
    ("json results/bench.json cases.0.ratio fmt=.3f", "0.981"),
    ("json results/bench.json cases 0 'est. step'", "1,958 ms"),
    ("goal results/bench.json cases.0.ratio at_least 0.98", "met"),
    ("goal results/bench.json cases.0.ratio above 0.99", "not met"),
    ("machine results/bench.json", "2-core CPU, load average 0.2 at its start"),
])
def test_inline_kinds(tmp_path, spec, want):
    src = _toy_repo(tmp_path)
    text = f"x <!-- edge-jax docs: {spec} -->old<!-- /edge-jax docs --> y"
    filled, stale = blocks.fill(text, src)
    assert filled == f"x <!-- edge-jax docs: {spec} -->{want}<!-- /edge-jax docs --> y"
    assert len(stale) == 1 and blocks.fill(filled, src)[1] == []


def test_a_benchmark_report_is_a_text_block(tmp_path):
    src = _toy_repo(tmp_path)
    (tmp_path / "results" / "b.json").write_text(json.dumps({"report": "ratio 0.98\n  PASS\n", "provenance": {}}))
    text = "<!-- edge-jax docs: report results/b.json -->\nold\n<!-- /edge-jax docs -->"
    assert blocks.fill(text, src)[0] == ("<!-- edge-jax docs: report results/b.json -->\n```text\nratio 0.98\n  PASS\n"
                                         "```\n<!-- /edge-jax docs -->")
    with pytest.raises(blocks.DocBlockError, match="bench.json holds no report"):
        blocks.fill(text.replace("b.json", "bench.json"), src)


def test_a_multiline_block_keeps_its_lines(tmp_path):
    src = _toy_repo(tmp_path)
    text = "<!-- edge-jax docs: mean toy a val_loss -->\nold\n<!-- /edge-jax docs: mean -->\n"
    want = "<!-- edge-jax docs: mean toy a val_loss -->\n3.133\n<!-- /edge-jax docs: mean -->\n"
    assert blocks.fill(text, src)[0] == want


@pytest.mark.parametrize("text,says", [
    ("a\n<!-- edge-jax docs: mean toy a val_loss -->3", "<text>:2: block 'mean toy a val_loss' is not closed"),
    ("<!-- edge-jax docs: nope -->1<!-- /edge-jax docs -->", "unknown doc block 'nope'"),
    ("a\n<!-- edge-jax doc: seeds toy -->1<!-- /edge-jax docs -->", "<text>:2: a docs marker that opens or closes no"),
    ("<!-- edge-jax docs: seeds toy -->1<!-- /edge-jax docs --> 2<!-- /edge-jax docs -->", "opens or closes no block"),
    ("<!-- edge-jax docs: mean toy z val_loss -->1<!-- /edge-jax docs -->", "grid toy has no cell 'z'"),
    ("<!-- edge-jax docs: mean toy a val_ppl -->1<!-- /edge-jax docs -->", "no record of toy/a has the metric"),
    ("<!-- edge-jax docs: mean nogrid a m -->1<!-- /edge-jax docs -->", "no ablation file ablations/nogrid.py"),
    ("<!-- edge-jax docs: json results/no.json x -->1<!-- /edge-jax docs -->", "results/no.json does not exist"),
    ("<!-- edge-jax docs: json results/bench.json cases.3 -->1<!-- /edge-jax docs -->", "has no 'cases.3'"),
    ("<!-- edge-jax docs: mean toy -->1<!-- /edge-jax docs -->", "has the wrong arguments"),
])
def test_errors_are_one_line(tmp_path, text, says):
    src = _toy_repo(tmp_path)
    with pytest.raises(blocks.DocBlockError) as e:
        blocks.fill(text, src)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_markers_shown_as_code_are_not_blocks():
    text = ("Write `<!-- edge-jax docs: KIND ... -->` before a number.\n\n"
            "```\n<!-- edge-jax docs: mean a b c -->\n```\n"
            "and <!-- edge-jax docs: seeds toy -->3<!-- /edge-jax docs --> seeds.\n")
    [block] = blocks.find(text)
    assert block.spec == "seeds toy" and block.body == "3" and block.line == 6


def test_compile_table_rows_come_from_the_compile_json(tmp_path):
    src = _toy_repo(tmp_path)
    row = {"mesh": "data=2,fsdp=128,tensor=1", "HBM / device": "13.52 GiB", "fits": "no: 2.51 GiB over; fits with "
           "--config.model.remat=full", "fix": "--config.model.remat=full", "est. step": "1,689 ms",
           "est. MFU": "41.2 %", "est. time for budget": "23.5 h (5.24e+10 tokens)"}
    (tmp_path / "results" / "toy" / "paper_compile.json").write_text(json.dumps({"v5e-256": {"rows": {"a": row}}}))
    text = '<!-- edge-jax docs: compile_table\n  "Toy `a`" "toy/paper/v5e-256/a"\n-->\nold\n<!-- /edge-jax docs -->'
    out = blocks.fill(text, src)[0].splitlines()
    assert out[5] == ("| Toy `a` | v5e-256, data 2 × fsdp 128 | 13.52 GiB | with `model.remat=full` | 1,689 ms | "
                      "41.2 % | 23.5 h (5.24e+10 tokens) |")
    with pytest.raises(blocks.DocBlockError, match="has no run 'b' on v5e-256"):
        blocks.fill(text.replace("/a\"", "/b\""), src)
