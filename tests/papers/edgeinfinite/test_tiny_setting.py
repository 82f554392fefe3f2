"""The tiny EdgeInfinite setting: prompt lengths at which the window matters (Table 2's no_window), the
in-window check of the base LM and how its numbers reach every cell, the config keys, the grids."""
import dataclasses
import json

import flax.linen as nn
import jax
import numpy as np
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.data.builders.longctx_tasks import TASKS, eval_prompts
from edge_jax.layers.infini.compressive import segment_layout
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.papers.edgeinfinite.config import PROMPT_SLACK, window_lengths
from edge_jax.papers.edgeinfinite.grid import stages
from edge_jax.papers.edgeinfinite.inference import EdgeInfiniteSession
from tests.helpers import perturbed

GATE = {"init_from": "/base"}


def _kept(n: int, sink: int, window: int, segment: int) -> tuple[int, int]:
    """(compressed segments, tokens left as KV cache after the sink) of an n-token prompt."""
    lay = segment_layout(n, sink, window, segment)
    return (0, n - sink) if lay is None else (lay.n_segments, lay.remaining)


def test_tiny_lengths_make_the_window_matter():
    """At every tiny prompt length (each prompt of every task, several seeds), dropping the window
    compresses one more segment and keeps fewer than `window` tokens; with the window the question
    and the text before it stay in the KV cache. The former lengths (powers of two) never differed."""
    c = load_config("configs/edgeinfinite.py", GATE)
    m = c.model
    S, W, seg = m.infini_sink, m.infini_window, m.infini_segment
    base_window = load_config("configs/edgeinfinite.py:stage=base").data.seq_len
    assert c.longctx.lengths == (2111, 4159, 8255)
    assert 4 * base_window <= min(c.longctx.lengths) and max(c.longctx.lengths) <= 16 * base_window + seg
    for length in c.longctx.lengths:
        for task in TASKS:
            for seed in range(3):
                for r in eval_prompts(task, length, 3, seed):
                    n = len(r["prompt"])  # byte tokens
                    assert length - PROMPT_SLACK <= n <= length
                    (segments, kept), (segments0, kept0) = _kept(n, S, W, seg), _kept(n, S, 0, seg)
                    assert segments0 == segments + 1 and W + seg > kept > seg and 0 < kept0 < W
                    assert kept > len(r["prompt"]) - r["prompt"].rindex("\n\nQuestion:")  # the question stays
    for length in (1024, 2048, 4096, 8192, 16384):  # the former lengths: the same layout without the window
        for task in TASKS:
            for r in eval_prompts(task, length, 3, 0):
                assert _kept(len(r["prompt"]), S, W, seg)[0] == _kept(len(r["prompt"]), S, 0, seg)[0]


@pytest.mark.parametrize("sink,window,segment", [(32, 32, 128), (300, 200, 2048), (4, 16, 32)])
def test_window_lengths(sink, window, segment):
    for target in (700, 2048, 5000):
        (length,) = window_lengths((target,), sink, window, segment)
        assert target <= length < target + segment
        for n in range(length - PROMPT_SLACK, length + 1):
            assert _kept(n, sink, 0, segment)[0] == _kept(n, sink, window, segment)[0] + 1
        assert _kept(length + 1, sink, 0, segment)[0] == _kept(length + 1, sink, window, segment)[0]  # the top
    assert window_lengths((2048,), 4, 8, 16) == (2048,)  # a window below the slack: no length works for all


def test_algorithm1_keeps_less_without_the_window_at_such_lengths():
    """The same at Algorithm 1's level: prefill at a window-sensitive length compresses one more segment
    without the window and keeps fewer tokens; at a length inside the band's complement nothing changes."""
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=32,
                      infini_hidden=4, infini_sink=4, infini_window=16, infini_segment=32)
    params = perturbed(nn.unbox(DecoderLM(cfg).init(jax.random.key(0), np.zeros((1, 8), np.int32))["params"]), 1)
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (1, 200), 0, 64))
    (length,) = window_lengths((150,), 4, 16, 32)
    runs = {}
    for keep in (True, False):
        model = DecoderLM(dataclasses.replace(cfg, infini_keep_window=keep))
        for n in (length, length + 2):
            session = EdgeInfiniteSession(model, params)
            session.prefill(tokens[:, :n])
            runs[keep, n] = (session.compressed_segments, session.cache_tokens())
    assert runs[False, length][0] == runs[True, length][0] + 1 and runs[False, length][1] < runs[True, length][1]
    assert runs[False, length + 2] == runs[True, length + 2]


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
    params = nn.unbox(model.init(jax.random.key(0), np.zeros((1, 8), np.int32))["params"])
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
        assert {"longctx/answer_nll", "base/inwindow/single_needle", "base/inwindow/multi_key"} <= set(
            grid.extra_metrics)
        assert "2,111, 4,159 and 8,255" in grid.notes and "base/inwindow" in grid.notes


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
    assert "training window (its stage's check, full attention): exact match single_needle 95.00, multi_key 85.00" in text
    assert "| 2111 |" in len_path.read_text()


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


def test_committed_records_load_to_todays_cell_configs():
    """Every committed EdgeInfinite record, upgraded to today's keys, is the config its cell loads today
    (base + recorded overrides + seed): records from before the harness had longctx.sink and an explicit
    longctx.budget mean what they ran (StreamingLLM's sink = model.infini_sink; budget = sink + window +
    segment), so nothing is rerun and no table changes."""
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
        want = flat_json(config)
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
