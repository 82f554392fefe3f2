"""Grid stages: a shared base is trained once and its workdir substituted into the cells."""
import json

import ml_collections
import pytest

from edge_jax.grid import runner, spec, stages


def _load(base, overrides):
    c = ml_collections.ConfigDict({"seed": 0, "init_from": "", "stage": base, "train": {"steps": 1}})
    for k, v in overrides.items():
        *parents, leaf = k.split(".")
        node = c
        for p in parents:
            node = node[p]
        node[leaf] = v
    return c


def staged_grid():
    """A grid of two cells on two stages: ``base`` (shared by the seeds) and ``gate`` (per seed, from base)."""
    return spec.validate_grid({
        "name": "g", "title": "t", "base": "cell", "base_overrides": {},
        "stages": {"base": {"base": "base", "shared": True},
                   "gate": {"base": "gate", "overrides": {"init_from": "{stage:base}"}}},
        "cells": {"a": {"init_from": "{stage:base}"}, "b": {"init_from": "{stage:gate}"}},
        "metric": "score", "lower_is_better": False, "extra_metrics": [],
        "paper": {"metric": "m", "values": {}, "higher_is_better": True, "source": "s"}, "notes": ""},
        preset="tiny")


def test_stages_train_once_and_resolve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []

    def train(config, wd):
        calls.append((config.stage, config.seed, config.init_from))
        (tmp_path / wd / "final_metrics.json").write_text(json.dumps({"score": 1.0}))
        return {"score": 1.0 + config.seed}

    grid = staged_grid()
    out = tmp_path / "results" / "g"
    summary = runner.run_grid(grid, out, runner.plan(grid, 2), train_fn=train, load_config=_load, log=lambda m: None)
    assert len(summary.ran) == 4
    stage_calls = [c for c in calls if c[0] != "cell"]
    assert [c[:2] for c in stage_calls] == [("base", 0), ("gate", 0), ("gate", 1)]   # base once, gate per seed
    assert stage_calls[1][2].startswith("results/_stages/base-") and stage_calls[1][2].endswith("seed0")
    cells = [c for c in calls if c[0] == "cell"]
    assert cells[1][2].startswith("results/_stages/gate-") and cells[3][2].endswith("seed1")


def test_unknown_stage_reference_is_one_line():
    with pytest.raises(spec.GridSpecError, match="refers to {stage:nope}"):
        spec.validate_grid({
            "name": "g", "title": "t", "base": "cell", "base_overrides": {}, "stages": {},
            "cells": {"a": {"init_from": "{stage:nope}"}}, "metric": "score", "lower_is_better": False,
            "extra_metrics": [], "paper": {"metric": "m", "values": {}, "higher_is_better": True, "source": "s"},
            "notes": ""}, preset="tiny")
    assert stages.references({"x": "{stage:a}/{stage:b}", "y": 3}) == ["a", "b"]


def test_stage_identity_covers_the_documents(tmp_path, monkeypatch):
    """Another version of a built-in dataset is another stage (never resumed on other documents)."""
    import tensorflow_datasets as tfds

    from edge_jax.config import load_config
    from edge_jax.data.builders import EdgeLongctx
    config = load_config("configs/edgeinfinite.py:stage=copy")
    key, where = stages.data_key(config), stages.stage_dir(tmp_path, "copy", config)
    assert key.startswith("longctx-len511_n16000_s0-v") and "_copies-len511_n16000_s0-v" in key
    monkeypatch.setattr(EdgeLongctx, "VERSION", tfds.core.Version("9.9.9"))
    assert stages.data_key(config) != key and stages.stage_dir(tmp_path, "copy", config) != where


def test_stage_written_before_a_key_rename_is_reused(tmp_path):
    """A gate stage trained with the old train.trainable=memory_gate / train.gate_lr keys is found by its
    upgraded config.json although its directory hash is the old one."""
    from edge_jax.config import load_config
    spec_ = "configs/edgeinfinite.py"
    config = load_config(spec_, {"init_from": "/base", "seed": 1})
    old = json.loads(json.dumps(config.to_dict()))
    old["train"].update(trainable="memory_gate", gate_lr=0.05)
    del old["train"]["lr_multipliers"]
    old["model"]["vocab_size"] = 320  # a workdir's config.json holds the size training took from the tokenizer
    legacy = tmp_path / "_stages" / "gate-0123456789" / "seed1"
    legacy.mkdir(parents=True)
    (legacy / "config.json").write_text(json.dumps(old))
    (legacy / "final_metrics.json").write_text("{}")
    (legacy / stages.DATA_KEY_FILE).write_text(stages.data_key(config) + "\n")
    assert stages.stage_dir(tmp_path, "gate", config).name != "gate-0123456789"
    trained = []
    gate = {"gate": {"base": spec_, "overrides": {"init_from": "/base"}}}
    got = stages.ensure("gate", gate, 1, tmp_path, lambda c, wd: trained.append(wd),
                        lambda base, o: load_config(base, o), log=lambda m: None)
    assert not trained and got == legacy
    # ... only when it names the same documents (a stage that does not say is trained again)
    for recorded in ["longctx-len799_n2000_s0-v0.9.0\n", None]:
        if recorded:
            (legacy / stages.DATA_KEY_FILE).write_text(recorded)
        else:
            (legacy / stages.DATA_KEY_FILE).unlink()
        assert stages._older_stage(tmp_path, "gate", 1, config) is None
    (legacy / stages.DATA_KEY_FILE).write_text(stages.data_key(config) + "\n")
    old["train"]["gate_lr"] = 0.1  # another learning rate is another run
    (legacy / "config.json").write_text(json.dumps(old))
    stages.ensure("gate", {"gate": {"base": spec_, "overrides": {"init_from": "/base"}}}, 1, tmp_path,
                  lambda c, wd: trained.append(wd), lambda base, o: load_config(base, o), log=lambda m: None)
    assert len(trained) == 1
