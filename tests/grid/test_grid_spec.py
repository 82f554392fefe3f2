"""edge_jax.grid.spec: loading ablation files and one-line validation errors."""
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_jax.grid import spec

REPO = Path(__file__).resolve().parents[2]

GOOD = {
    "name": "toy",
    "title": "Toy table",
    "base": "configs/lm.py:size=tiny",
    "base_overrides": {"train.steps": 20},
    "cells": {"a": {"model.d_ff": 64}, "b": {"model.d_ff": 128}, "c": {}},
    "metric": "val_loss",
    "lower_is_better": True,
    "extra_metrics": ["val_ppl"],
    "paper": {"metric": "avg accuracy", "values": {"a": 50.0, "b": 55.5, "c": None},
              "higher_is_better": True, "source": "Toy Table 1"},
    "notes": "",
}


def grid_with(**changes):
    raw = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if key.startswith("paper_"):
            raw["paper"][key[len("paper_"):]] = value
        elif value is ...:
            del raw[key]
        else:
            raw[key] = value
    return raw


def error_of(raw) -> str:
    with pytest.raises(spec.GridSpecError) as info:
        spec.validate_grid(raw, preset="tiny", path="toy.py")
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_good_grid_validates_and_derives_paper_order():
    g = spec.validate_grid(copy.deepcopy(GOOD), preset="tiny", path="toy.py")
    assert list(g.cells) == ["a", "b", "c"]
    assert g.paper.order == ("b", "a") and not g.paper.order_is_explicit
    assert g.paper.ranks() == {"b": 1, "a": 2}
    assert g.overrides("a", 3, {"train.steps": 5}) == {
        "train.steps": 5, "model.d_ff": 64, "seed": 3}


def test_paper_ties_share_a_rank():
    raw = grid_with(paper_values={"a": 1.0, "b": 1.0, "c": 2.0}, paper_higher_is_better=False)
    g = spec.validate_grid(raw, preset="tiny")
    assert g.paper.ranks() == {"a": 1, "b": 1, "c": 3}


@pytest.mark.parametrize("raw, expected", [
    (grid_with(metric=...), "missing key(s): metric"),
    (grid_with(colour="red"), "unknown key(s): colour"),
    (grid_with(cells={}), "'cells' must be a non-empty dict"),
    (grid_with(cells={"a/b": {}}), "cell name 'a/b'"),
    (grid_with(cells={"a": {"seed": 1}}), "sets 'seed'"),
    (grid_with(cells={"a": ["x"]}), "cell 'a': overrides must be a dict"),
    (grid_with(lower_is_better="yes"), "'lower_is_better' must be True or False"),
    (grid_with(extra_metrics=["val_loss"]), "repeats the primary metric"),
    (grid_with(paper_values={"zz": 1.0}), "paper.values names 'zz', which is not a cell"),
    (grid_with(paper_values={"a": "high"}), "paper.values['a'] must be a finite number"),
    (grid_with(paper_order=["b", "nope"]), "paper.order names 'nope'"),
    (grid_with(paper_order=["a", "b"]), "paper.order puts 'a' before 'b'"),
    (grid_with(paper_order=["b", "b"]), "paper.order has duplicates"),
    (grid_with(paper_color=1), "paper: unknown key(s): color"),
    (grid_with(name="has space"), "name 'has space' must match"),
])
def test_validation_errors_are_one_line(raw, expected):
    msg = error_of(raw)
    assert expected in msg
    assert msg.startswith("toy.py (preset 'tiny'): ")


def test_missing_paper_key():
    raw = copy.deepcopy(GOOD)
    del raw["paper"]["source"]
    assert "paper: missing key(s): source" in error_of(raw)


def test_explicit_order_without_numbers():
    raw = grid_with(paper_values={}, paper_order=["c", "a", "b"])
    g = spec.validate_grid(raw, preset="tiny")
    assert g.paper.order == ("c", "a", "b") and g.paper.order_is_explicit
    assert g.paper.ranks() == {"c": 1, "a": 2, "b": 3}


def test_order_with_an_unordered_group():
    g = spec.validate_grid(grid_with(paper_values={}, paper_order=["b", ["a", "c"]]), preset="tiny")
    assert g.paper.order == ("b", "a", "c") and g.paper.ranks() == {"b": 1, "a": 2, "c": 2}
    from edge_jax.grid.tables import ordering_agreement
    agreement = ordering_agreement({"b": 1, "a": 3, "c": 2}, g.paper.ranks())
    assert agreement.agrees and agreement.ordered_pairs == 2   # a vs c is not claimed


def test_load_errors(tmp_path):
    with pytest.raises(spec.GridSpecError, match="not found"):
        spec.load_grid(tmp_path / "nope.py")
    (tmp_path / "empty.py").write_text("X = 1\n")
    with pytest.raises(spec.GridSpecError, match="defines no get_grid"):
        spec.load_grid(tmp_path / "empty.py")
    (tmp_path / "broken.py").write_text("import no_such_module_xyz\n")
    with pytest.raises(spec.GridSpecError, match="import failed: ModuleNotFoundError"):
        spec.load_grid(tmp_path / "broken.py")


def test_plm_schedule_ablation_loads_for_both_presets():
    from edge_jax.config import load_config
    path = REPO / "ablations" / "plm_schedule.py"
    tiny = spec.load_grid(path, "tiny")
    assert list(tiny.cells) == ["cosine", "wsd", "wsdc"]
    assert tiny.base == "configs/plm.py:size=tiny" and tiny.metric == "val_loss"
    assert tiny.paper.order == ("wsdc", "wsd", "cosine") and tiny.paper.order_is_explicit
    paper = spec.load_grid(path, "paper")
    t = load_config(paper.base).train
    assert t.schedule == "wsdc" and t.lr == 3e-4 and t.min_lr == 3e-5
    assert t.warmup_steps == t.steps // 100 and 0 < t.decay_fraction + t.tail_fraction < 1
    with pytest.raises(spec.GridSpecError, match="unknown preset 'huge' of .*plm_schedule.py; presets: tiny, paper"):
        spec.load_grid(path, "huge")


@pytest.mark.parametrize("name", ["plm_activation", "plm_attention", "plm_arch_search"])
def test_plm_ablations_load_and_their_cells_validate(name):
    from edge_jax.config import load_config
    grid = spec.load_grid(REPO / "ablations" / f"{name}.py", "tiny")
    assert grid.post
    for cell in grid.cells:
        load_config(grid.base, grid.overrides(cell, 0))


def test_zero_shot_sets_the_eval_key_and_adds_the_column():
    g = spec.validate_grid(grid_with(zero_shot="builtin"), preset="tiny")
    assert g.base_overrides["eval.zero_shot"] == "builtin" and g.extra_metrics == ("val_ppl", "zero_shot_avg")
    assert g.overrides("a", 0)["eval.zero_shot"] == "builtin"
    ranked = spec.validate_grid(grid_with(zero_shot="meki10", metric="zero_shot_avg"), preset="tiny")
    assert ranked.extra_metrics == ("val_ppl",)
    assert "'zero_shot' must be a string" in error_of(grid_with(zero_shot=["builtin"]))
    both = grid_with(zero_shot="builtin", base_overrides={"eval.zero_shot": "meki10"})
    assert "sets both 'zero_shot' and base_overrides['eval.zero_shot']" in error_of(both)


REGISTRY_GRID = '''
def get_grid(preset):
    from edge_jax.infer.kv_baselines import KV_METHODS   # the core's methods; a paper's come with the plugins
    return {"name": "kv", "title": "T", "base": "b.py", "base_overrides": {}, "metric": "m",
            "lower_is_better": True, "extra_metrics": [], "notes": "", "cells": {n: {} for n in KV_METHODS.names()},
            "paper": {"metric": "m", "values": {}, "higher_is_better": True, "source": "s"}}
'''

# In a fresh process (no plugin loaded): the registry as the ablation file first sees it, the grid's cells,
# the registry once every plugin has registered, and whether JAX was imported.
PROBE = '''
import json, sys
from edge_jax.grid import spec
from edge_jax.infer.kv_baselines import KV_METHODS
before = list(KV_METHODS.names())
cells = list(spec.load_grid(sys.argv[1]).cells)
print(json.dumps([before, cells, list(KV_METHODS.names())]))
'''


@pytest.mark.subprocess
def test_a_grid_built_from_a_registry_sees_every_registration(tmp_path):
    (tmp_path / "kv.py").write_text(REGISTRY_GRID)
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "kv.py")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before, cells, full = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(before) < len(full)   # a paper registers a method of its own
    assert cells == full
