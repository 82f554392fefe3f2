"""The tiny EdgeInfinite setting: the in-window check of the base LM and how its numbers reach every
cell, the config keys, the grids and their reports (the prompt lengths: test_layouts.py)."""
import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.papers.edgeinfinite.grid import stages

GATE = {"init_from": "/base"}


def test_tiny_base_setting_and_inwindow_keys():
    c = load_config("configs/edgeinfinite.py:stage=base")
    assert (c.data.longctx_length + 1, c.data.seq_len) == (512, 512)  # one whole document per window
    assert c.train.steps == 1000 and c.longctx.inwindow_examples == 20
    assert c.data.name == "longctx+drills"  # many key-value lookups: multikey needs them
    copy = load_config("configs/edgeinfinite.py:stage=copy")  # copying first: the base does not retrieve without it
    assert copy.data.name == "longctx+copies" and copy.model.to_dict() == c.model.to_dict()
    assert copy.train.steps == 1500 and copy.train.lr == c.train.lr and copy.longctx.inwindow_examples == 0
    assert {k: v for k, v in copy.data.items() if k != "name"} == {k: v for k, v in c.data.items() if k != "name"}
    with pytest.raises(ConfigError, match="stage=copy is a tiny-preset schedule; size=paper has stages base, gate"):
        load_config("configs/edgeinfinite.py:size=paper,stage=copy")
    grid_stages = stages("tiny")  # copy, copy again from its weights, then the base from those
    assert list(grid_stages) == ["copy", "copy2", "base", "gate"]
    assert grid_stages["copy2"]["base"] == grid_stages["copy"]["base"]
    assert [grid_stages[s].get("overrides", {}).get("init_from") for s in ("copy", "copy2", "base")] == [
        None, "{stage:copy}", "{stage:copy2}"]
    assert list(stages("paper")) == ["base", "gate"] and "overrides" not in stages("paper")["base"]
    assert max(c.longctx.inwindow_lengths) + c.longctx.answer_tokens <= c.data.seq_len
    gate = load_config("configs/edgeinfinite.py", GATE)
    assert gate.data.longctx_length + 1 == gate.data.seq_len and gate.longctx.inwindow_examples == 0


def test_the_gate_stage_is_the_cells_gate_with_its_first_prompt_keys():
    """The gate stage trains what the EdgeInfinite cells evaluate; it evaluates nothing itself, and its
    prompt keys stay those it was first trained with (be43506: 3 lengths x 2 prompts, no near band), so
    the cells' prompts change without training the gates again."""
    from edge_jax.config import flat_json
    from edge_jax.grid.spec import load_grid
    grid = load_grid("ablations/edgeinfinite_tokens.py", "tiny")
    stage = grid.stages["gate"]
    gate = flat_json(load_config(stage["base"], {**stage["overrides"], "init_from": "/base"}))
    cell = flat_json(load_config(grid.base, {**grid.overrides("full", 0, {}), "init_from": "/base"}))
    assert {k for k in gate if gate[k] != cell.get(k)} == {"train.steps", "longctx.method", "longctx.lengths",
                                                            "longctx.near_lengths", "longctx.examples"}
    assert gate["longctx.method"] == "" and gate["train.steps"] == 150 and cell["train.steps"] == 0
    assert json.loads(json.dumps([gate[f"longctx.{k}"] for k in ("lengths", "near_lengths", "examples")])) == [
        [2111, 4159, 8255], [], 2]
    with pytest.raises(ConfigError, match="inwindow_lenghts"):
        load_config("configs/edgeinfinite.py:stage=base", {"longctx.inwindow_lenghts": (400,)})
    for overrides, message in [({"longctx.inwindow_lengths": (510,)}, "must fit the training window"),
                               ({"longctx.inwindow_lengths": (300,)}, r"each in \[371, "),
                               ({"longctx.inwindow_lengths": ()}, "must be non-empty"),
                               ({"model.infini_hidden": 8}, "checks a base LM with full attention")]:
        with pytest.raises(ConfigError, match=message) as err:
            load_config("configs/edgeinfinite.py:stage=base", overrides)
        assert "\n" not in str(err.value)


def test_inwindow_check_and_its_numbers_in_every_cell(tmp_path):
    """The in-window evaluator on a small random model; a cell finds its base's numbers through init_from
    (a baseline's base directly, EdgeInfinite's through its gate)."""
    from edge_jax.data import get_tokenizer
    from edge_jax.infer.longctx import base_inwindow, evaluate_inwindow
    config = load_config("configs/edgeinfinite.py:stage=base", {"longctx.inwindow_examples": 2,
                                                                 "longctx.inwindow_lengths": (380, 400)})
    model = DecoderLM(ModelConfig(vocab_size=320, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16,
                                  d_ff=32))
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), np.zeros((1, 8), np.int32))["params"])  # one compile
    got = evaluate_inwindow(model, params, get_tokenizer("byte", "longctx"), config, log=lambda m: None)
    for cat in ("single_needle", "multi_key"):
        assert 0 <= got[f"inwindow/{cat}"] <= 100 and got[f"inwindow/answer_nll/{cat}"] > 0
        assert {f"inwindow/{cat}/len380", f"inwindow/{cat}/len400"} <= set(got)
    assert got["inwindow/prompts"] == 8
    base, gate = tmp_path / "base", tmp_path / "gate"
    base.mkdir(), gate.mkdir()
    (base / "final_metrics.json").write_text(json.dumps({"val_loss": 1.0, **got}))
    (gate / "final_metrics.json").write_text(json.dumps({"val_loss": 0.5}))
    (gate / "config.json").write_text(json.dumps({"init_from": str(base)}))
    carried = base_inwindow(str(gate))
    assert carried == {f"base/{k}": v for k, v in got.items() if k.startswith("inwindow/")}
    assert base_inwindow(str(base)) == carried and base_inwindow("") == {} and base_inwindow(str(tmp_path)) == {}


def test_grids_rank_by_exact_match_and_carry_the_check():
    from edge_jax.grid.spec import load_grid
    for name, cells in (("edgeinfinite_main", {"fullkv", "streamingllm", "snapkv", "pyramidkv", "edgeinfinite"}),
                        ("edgeinfinite_tokens", {"full", "no_window", "no_sink", "no_both"})):
        grid = load_grid(f"ablations/{name}.py", "tiny")
        assert grid.metric == "longctx/overall" and not grid.lower_is_better and set(grid.cells) == cells
        assert {"longctx/answer_nll", "longctx/near/overall", "longctx/near/answer_nll",
                "base/inwindow/single_needle", "base/inwindow/multi_key"} <= set(grid.extra_metrics)
        assert "4, 8 and 16 x the base's window" in grid.notes and "base/inwindow" in grid.notes
        # the lengths scored and the KV slots kept come from the records (docs.record_notes), not the notes
        assert grid.record_notes == "edge_jax.papers.edgeinfinite.docs:record_notes" and "192" not in grid.notes


def test_categories_report_states_the_base_check(tmp_path):
    from edge_jax.grid.spec import load_grid
    from edge_jax.papers.edgeinfinite.grid import CATEGORIES
    from edge_jax.papers.edgeinfinite.report import write_categories
    grid = load_grid("ablations/edgeinfinite_main.py", "tiny")
    records = [{"cell": cell, "seed": seed, "metrics": {
        "longctx/overall": 10.0 * i + seed, "longctx/answer_nll": 1.0, "longctx/len2111": 5.0,
        "base/inwindow/single_needle": 95.0, "base/inwindow/multi_key": 85.0,
        **{f"longctx/{c}": float(i) for c in CATEGORIES}}} for i, cell in enumerate(grid.cells) for seed in (0, 1)]
    cat_path, len_path = write_categories(grid, records, tmp_path)
    text = cat_path.read_text()
    assert ("training window (its stage's check, full attention): exact match single_needle 95.00, "
            "multi_key 85.00") in text
    assert "| 2111 |" in len_path.read_text() and "near" not in text  # records without a near band: as before


def test_categories_report_has_the_near_band(tmp_path):
    """Records with a near band: categories.md gets a section for it (exact match by category, the
    paper's pairs tested on its exact match and its answer NLL), lengths.md marks its lengths."""
    from edge_jax.grid.spec import load_grid
    from edge_jax.papers.edgeinfinite.grid import CATEGORIES
    from edge_jax.papers.edgeinfinite.report import write_categories
    grid = load_grid("ablations/edgeinfinite_tokens.py", "tiny")
    near = {"full": 90.0, "no_window": 80.0, "no_sink": 70.0, "no_both": 60.0}  # the paper's order
    records = [{"cell": cell, "seed": seed, "config": {"longctx": {"near_lengths": [543, 575]}}, "metrics": {
        "longctx/overall": 0.0, "longctx/answer_nll": 2.0, "longctx/len2079": 0.0, "longctx/len543": near[cell],
        "longctx/near/overall": near[cell] + seed * (i % 2), "longctx/near/answer_nll": 0.1 * i + 0.01 * seed,
        **{f"longctx/near/{c}": near[cell] for c in CATEGORIES},
        **{f"longctx/near/answer_nll/{c}": 0.5 for c in CATEGORIES}}}
        for i, cell in enumerate(grid.cells) for seed in (0, 1, 2)]
    cat_path, len_path = write_categories(grid, records, tmp_path)
    text = cat_path.read_text()
    assert "## The paper's band (`longctx/overall`" in text
    near_part = text[text.index("## The near band (`longctx/near/overall`; 543, 575 tokens)"):]
    assert "| full | 90.00 ± 0.00 (11.17) |" in near_part
    assert "- overall: +1.00; ours best first: full, no_window, no_sink, no_both" in near_part
    assert "On the near band's exact match, the paper's ordered pairs: 6 agree, 0 disagree, 0 within noise" in near_part
    assert "On the near band's answer NLL, the paper's ordered pairs: 6 agree" in near_part
    assert "| cell | 543 (near) | 2079 |" in len_path.read_text()


def test_categories_report_tests_the_papers_pairs_on_answer_nll(tmp_path):
    from edge_jax.grid.spec import load_grid
    from edge_jax.papers.edgeinfinite.report import write_categories
    grid = load_grid("ablations/edgeinfinite_main.py", "tiny")
    nll = {"edgeinfinite": 1.0, "fullkv": 3.0, "snapkv": 2.0, "pyramidkv": 2.5, "streamingllm": 4.0}
    records = [{"cell": cell, "seed": seed, "metrics": {
        "longctx/overall": 0.0, "longctx/answer_nll": nll[cell] + 0.05 * ((7 * seed + i) % 3)}}
        for i, cell in enumerate(grid.cells) for seed in (0, 1, 2)]
    text = write_categories(grid, records, tmp_path)[0].read_text()
    # Paper: edgeinfinite > fullkv > snapkv > pyramidkv > streamingllm; lower NLL is better here.
    assert "On the answer NLL, the paper's ordered pairs: 8 agree, 2 disagree, 0 within noise" in text
    assert "| edgeinfinite > fullkv | 3 | 2 |" in text
    assert "| fullkv > snapkv | 3 | -1 |" in text and "disagree: FullKV attends to every prompt token" in text


PROMPT_KEYS = ("longctx.lengths", "longctx.near_lengths", "longctx.examples")
FORMER_PROMPTS = {"longctx.lengths": [2111, 4159, 8255], "longctx.near_lengths": [], "longctx.examples": 2}


def test_committed_records_load_to_todays_cell_configs():
    """Every committed EdgeInfinite record, upgraded to today's keys, is the config its cell loads today
    (base + recorded overrides + seed): records from before the harness had longctx.sink and an explicit
    longctx.budget mean what they ran (StreamingLLM's sink = model.infini_sink; budget = sink + window +
    segment). Records from before the tiny prompt mix (3 lengths x 2 prompts, no near band) differ from
    today's cells in those prompt keys alone, until the grids are run again."""
    import glob
    import pathlib

    from edge_jax.config import flat_json, flatten, schema_defaults, upgrade_config
    root = pathlib.Path(__file__).resolve().parents[3]
    paths = sorted(glob.glob(str(root / "results" / "edgeinfinite_*" / "records" / "*.json")))
    assert len(paths) >= 27
    for path in paths:
        rec = json.loads(pathlib.Path(path).read_text())
        config = load_config(rec["base"], {**rec["overrides"], "seed": rec["seed"]})
        have = json.loads(json.dumps({**flat_json(schema_defaults(config)), **flatten(upgrade_config(rec["config"]))}))
        want = json.loads(json.dumps(flat_json(config)))
        if have["longctx.lengths"] != want["longctx.lengths"]:
            assert {k: have.pop(k) for k in PROMPT_KEYS} == FORMER_PROMPTS, path
            for k in PROMPT_KEYS:
                want.pop(k)
        assert have == want, path


def test_upgrade_makes_the_baselines_sizes_explicit():
    from edge_jax.config import flatten, upgrade_config
    old = {"model": {"infini_sink": 32, "infini_window": 32, "infini_segment": 128},
           "longctx": {"method": "streamingllm", "budget": 0}}
    got = flatten(upgrade_config(old))
    assert (got["longctx.sink"], got["longctx.budget"]) == (32, 192)
    old["longctx"]["budget"] = 100  # an explicit budget stays
    assert flatten(upgrade_config(old))["longctx.budget"] == 100
    assert "longctx.sink" not in flatten(upgrade_config({"model": {"infini_segment": 0}}))  # not an EdgeInfinite run
    new = {**old, "longctx": {"method": "streamingllm", "budget": 0, "sink": 4}}
    assert flatten(upgrade_config(new))["longctx.budget"] == 0  # written with the key: as it is
