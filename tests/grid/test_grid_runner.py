"""edge_jax.grid.runner and command: indexing, records, skip, resume, failures.

The real config loader and training loop are replaced by fakes: the fake loop
writes a small metrics.jsonl whose losses depend on the cell's overrides and seed.
"""
import argparse
import json
import math
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import config_loader

from edge_jax.errors import UserError
from edge_jax.grid import command, reuse, runner, spec

ABLATION = '''
def get_grid(preset):
    if preset not in ("tiny",):
        raise ValueError(f"unknown preset {preset!r}; valid presets: tiny")
    return {
        "name": "toy", "title": "Toy schedule table", "base": "fake.py:tiny",
        "base_overrides": {"train.steps": 30},
        "cells": {"cosine": {"train.schedule": "cosine"}, "wsd": {"train.schedule": "wsd"},
                  "wsdc": {"train.schedule": "wsdc"}},
        "metric": "val_loss", "lower_is_better": True,
        "extra_metrics": ["val_ppl", "tokens_per_s"],
        "paper": {"metric": "preference", "values": {}, "higher_is_better": True,
                  "order": ["wsdc", "wsd", "cosine"], "source": "Toy §4"},
        "notes": "toy notes",
    }
'''
LOSS = {"cosine": 3.0, "wsd": 2.9, "wsdc": 2.8}


fake_load_config = config_loader({"seed": 0, "train": {"steps": 10, "schedule": "cosine"}, "model": {"d_model": 8}})


class FakeTrain:
    """Records its calls; `fail` maps cell -> exception raised after some logging."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail or {}

    def __call__(self, config, workdir):
        self.calls.append((config.train.schedule, config.seed))
        final = LOSS[config.train.schedule] + 0.01 * config.seed
        with open(f"{workdir}/metrics.jsonl", "a") as f:
            for step in range(0, config.train.steps + 1, 10):
                loss = final + (config.train.steps - step) / 100
                f.write(json.dumps({"step": step, "kind": "train", "loss": loss, "lr": 1e-3}) + "\n")
                f.write(json.dumps({"step": step, "kind": "eval", "val_loss": loss,
                                    "val_ppl": math.exp(loss)}) + "\n")
                if step == 10 and config.train.schedule in self.fail:
                    raise self.fail[config.train.schedule]
        return {"val_loss": np.float32(final), "val_ppl": math.exp(final),
                "train_loss": final + 0.1, "steps": config.train.steps, "tokens_per_s": 1000.0}


@pytest.fixture
def ablation(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(textwrap.dedent(ABLATION))
    return path


def cli(argv, train=None, load=fake_load_config):
    """``command.run`` as the CLI calls it: a UserError is one line on stderr and status 2."""
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    logs = []
    try:
        rc = command.run(parser.parse_args([str(a) for a in argv]), train_fn=train,
                         load_config=load, log=logs.append)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        rc = 2
    return rc, logs


def test_plan_is_seed_major(ablation):
    grid = spec.load_grid(ablation)
    units = runner.plan(grid, 2)
    assert [(u.index, u.cell, u.seed) for u in units] == [
        (0, "cosine", 0), (1, "wsd", 0), (2, "wsdc", 0),
        (3, "cosine", 1), (4, "wsd", 1), (5, "wsdc", 1)]
    assert units[4].name == "wsd__seed1"


def test_list_prints_index_cell_seed_status(ablation, tmp_path):
    out = tmp_path / "out"
    rc, logs = cli([ablation, "--out", out, "--list", "--seeds", "2"])
    assert rc == 0
    assert logs == [f"{k}\t{c}\t{s}\tmissing" for k, (s, c) in
                    enumerate((s, c) for s in range(2) for c in ("cosine", "wsd", "wsdc"))]


def test_cell_runs_one_unit_and_rejects_out_of_range(ablation, tmp_path, capsys):
    out, train = tmp_path / "out", FakeTrain()
    rc, _ = cli([ablation, "--out", out, "--cell", 4, "--seeds", 2], train)
    assert rc == 0 and train.calls == [("wsd", 1)]
    assert [p.name for p in (out / "records").iterdir()] == ["wsd__seed1.json"]
    rc, _ = cli([ablation, "--out", out, "--list"])
    rc, _ = cli([ablation, "--out", out, "--cell", 6, "--seeds", 2], train)
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --cell 6 out of range; valid: 0..5 (3 cells x 2 seeds; see --list)"


def test_full_run_writes_records_tables_and_plot(ablation, tmp_path):
    out, train = tmp_path / "out", FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 2], train)
    assert rc == 0 and len(train.calls) == 6
    assert sorted(p.name for p in (out / "records").iterdir()) == sorted(
        f"{c}__seed{s}.json" for c in LOSS for s in range(2))
    for name in ("table.md", "table.csv", "curves.png"):
        assert (out / name).stat().st_size > 0
    md = (out / "table.md").read_text()
    # the fake losses differ by the same amount on every seed: significant, in the paper's direction
    assert "Paper's ordered pairs: 3 agree, 0 disagree, 0 within noise" in md and "Kendall τ = 1.00 over 3" in md
    assert "Missing" not in md


def test_record_has_required_fields(ablation, tmp_path):
    out = tmp_path / "out"
    cli([ablation, "--out", out, "--seeds", 1, "--set", "train.steps=20"], FakeTrain())
    rec = json.loads((out / "records" / "wsdc__seed0.json").read_text())
    for key in ("grid", "cell", "seed", "preset", "base", "overrides", "config", "git",
                "metrics", "curve", "train_curve", "wall_time_s", "device",
                "started_at", "finished_at", "versions"):
        assert key in rec, key
    assert (rec["grid"], rec["cell"], rec["seed"], rec["preset"]) == ("toy", "wsdc", 0, "tiny")
    assert rec["overrides"] == {"train.steps": 20, "train.schedule": "wsdc", "seed": 0}
    assert rec["config"]["train"] == {"steps": 20, "schedule": "wsdc"}
    assert rec["git"] == {"commit": None, "dirty": None} or set(rec["git"]) == {"commit", "dirty"}
    assert rec["command"] and rec["cwd"]
    assert rec["metrics"]["val_loss"] == pytest.approx(2.8)     # numpy scalar made JSON
    assert rec["curve"] == [[0, pytest.approx(3.0)], [10, pytest.approx(2.9)],
                            [20, pytest.approx(2.8)]]
    assert [s for s, _ in rec["train_curve"]] == [0, 10, 20]
    assert set(rec["device"]) >= {"platform", "device_kind", "device_count"}
    assert set(rec["versions"]) >= {"python", "jax"}
    assert rec["wall_time_s"] >= 0 and rec["started_at"] <= rec["finished_at"]


def test_skip_existing(ablation, tmp_path):
    out = tmp_path / "out"
    cli([ablation, "--out", out, "--seeds", 1], FakeTrain())
    before = (out / "records" / "wsd__seed0.json").read_text()
    train = FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 2], train)
    assert rc == 0 and train.calls == [("cosine", 1), ("wsd", 1), ("wsdc", 1)]
    assert sum("skipped, record exists" in line for line in logs) == 3
    assert (out / "records" / "wsd__seed0.json").read_text() == before


def test_failing_cell_continues_then_rerun_completes_only_it(ablation, tmp_path):
    out = tmp_path / "out"
    train = FakeTrain(fail={"wsd": RuntimeError("NaN loss at step 10\nmore detail")})
    rc, logs = cli([ablation, "--out", out, "--seeds", 1], train)
    assert rc == 1
    assert train.calls == [("cosine", 0), ("wsd", 0), ("wsdc", 0)]
    failed = [line for line in logs if line.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith("FAILED wsd seed 0: RuntimeError: NaN loss")
    assert not (out / "records" / "wsd__seed0.json").exists()
    assert "Traceback" in (out / "runs" / "wsd" / "seed0" / "error.log").read_text()
    assert "Missing records: wsd (seed 0)" in (out / "table.md").read_text()

    train = FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 1], train)
    assert rc == 0 and train.calls == [("wsd", 0)]
    rec = json.loads((out / "records" / "wsd__seed0.json").read_text())
    assert rec["resumed"] is True      # the workdir held the crashed run's metrics
    assert not (out / "runs" / "wsd" / "seed0" / "error.log").exists()
    assert "Missing" not in (out / "table.md").read_text()


def test_kill_midway_then_rerun_runs_only_missing(ablation, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):   # a kill is not a cell failure: it stops the grid
        cli([ablation, "--out", out, "--seeds", 1], FakeTrain(fail={"wsd": KeyboardInterrupt()}))
    assert [p.name for p in (out / "records").iterdir()] == ["cosine__seed0.json"]
    assert list((out / "records").glob("*.tmp")) == []
    train = FakeTrain()
    assert cli([ablation, "--out", out, "--seeds", 1], train)[0] == 0
    assert train.calls == [("wsd", 0), ("wsdc", 0)]


def test_workdir_from_other_settings_is_refused(ablation, tmp_path):
    out = tmp_path / "out"
    cli([ablation, "--out", out, "--seeds", 1], FakeTrain(fail={"wsd": RuntimeError("boom")}))
    train = FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 1, "--set", "train.steps=20"], train)
    assert rc == 1 and train.calls == []
    assert any("holds a run with different overrides" in line for line in logs)


def test_a_bad_set_refuses_the_grid_before_any_unit(ablation, tmp_path, capsys):
    out, train = tmp_path / "out", FakeTrain()
    rc, logs = cli([ablation, "--out", out, "--seeds", 1, "--set", "train.nope=1"], train)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and train.calls == [] and logs == [] and not out.exists()
    assert err.startswith("error: --set: unknown config key 'train.nope' (in cell 'cosine' of ") and "\n" not in err


def test_tables_only_rebuilds_from_records_without_training(ablation, tmp_path):
    out = tmp_path / "out"
    cli([ablation, "--out", out, "--seeds", 2], FakeTrain())
    for name in ("table.md", "table.csv", "curves.png"):
        (out / name).unlink()
    (out / "records" / "cosine__seed1.json").unlink()

    def no_training(*a):
        raise AssertionError("--tables-only must not train")
    rc, _ = cli([ablation, "--out", out, "--tables-only", "--seeds", 2], no_training)
    assert rc == 0
    md = (out / "table.md").read_text()
    assert "Missing records: cosine (seed 1)." in md
    assert (out / "curves.png").exists()
    assert "cosine,1,0" in (out / "table.csv").read_text()


def test_records_of_another_preset_are_refused(ablation, tmp_path, capsys):
    out = tmp_path / "out"
    cli([ablation, "--out", out, "--seeds", 1], FakeTrain())
    rec_path = out / "records" / "wsd__seed0.json"
    rec = json.loads(rec_path.read_text())
    rec["preset"] = "paper"
    rec_path.write_text(json.dumps(rec))
    rc, _ = cli([ablation, "--out", out, "--seeds", 2], FakeTrain())
    assert rc == 2 and "holds records of grid 'toy' preset 'paper'" in capsys.readouterr().err


def test_bad_arguments_exit_2(ablation, tmp_path, capsys):
    assert cli([ablation, "--preset", "paper"])[0] == 2
    assert "unknown preset 'paper'; valid presets: tiny" in capsys.readouterr().err
    assert cli([ablation, "--set", "noequals"])[0] == 2
    assert cli([ablation, "--set", "seed=3"])[0] == 2
    with pytest.raises(SystemExit) as info:   # argparse's one-line usage error
        cli([ablation, "--seeds", 0])
    assert info.value.code == 2 and "argument --seeds: needs an integer >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    ("train.steps=200", ("train.steps", 200)),
    ("train.schedule=wsd", ("train.schedule", "wsd")),
    ("train.lr=3e-4", ("train.lr", 3e-4)),
    ("model.qk_norm=false", ("model.qk_norm", False)),
    ("data.name='a b'", ("data.name", "a b")),
])
def test_parse_assignment(text, expected):
    assert command.parse_assignment(text) == expected


def test_default_out_dir(ablation):
    assert str(command.default_out(spec.load_grid(ablation))) == "results/toy"


def test_read_curves_dedupes_resumed_steps_and_skips_torn_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join([
        json.dumps({"step": 20, "kind": "eval", "val_loss": 2.0}),
        json.dumps({"step": 10, "kind": "eval", "val_loss": 3.0}),
        json.dumps({"step": 20, "kind": "eval", "val_loss": 1.5}),
        json.dumps({"step": 10, "kind": "train", "loss": 3.3}),
        '{"step": 30, "kind": "ev',
    ]))
    curves = runner.read_curves(path)
    assert curves == {"val_loss": [[10, 3.0], [20, 1.5]], "train_loss": [[10, 3.3]]}
    assert runner.read_curves(tmp_path / "absent.jsonl") == {"val_loss": [], "train_loss": []}


def test_identical_cells_of_sibling_grids_are_reused_not_retrained(ablation, tmp_path):
    first = tmp_path / "results" / "toy_a"
    cli([ablation, "--out", first, "--seeds", 1], FakeTrain())
    other = tmp_path / "other.py"
    other.write_text(textwrap.dedent(ABLATION).replace('"name": "toy"', '"name": "toy_b"').replace(
        '"wsdc": {"train.schedule": "wsdc"}', '"wsdc": {"train.schedule": "wsdc", "model.d_model": 16}'))
    second, train = tmp_path / "results" / "toy_b", FakeTrain()
    rc, logs = cli([other, "--out", second, "--seeds", 1], train)
    assert rc == 0 and train.calls == [("wsdc", 0)]          # only the cell whose config differs
    rec = json.loads((second / "records" / "wsd__seed0.json").read_text())
    assert rec["grid"] == "toy_b" and rec["reused_from"].endswith("toy_a/records/wsd__seed0.json")
    assert rec["metrics"]["val_loss"] == pytest.approx(2.9)
    assert sum("reused" in line for line in logs) >= 2
    train = FakeTrain()
    cli([other, "--out", tmp_path / "results" / "toy_c", "--seeds", 1, "--no-reuse"], train)
    assert len(train.calls) == 3


def test_a_sibling_run_on_other_documents_is_not_reused(ablation, tmp_path):
    """The same config over other documents (another dataset version), or a record that does not say
    which documents it trained on, is not reused."""
    first = tmp_path / "results" / "toy_a"
    cli([ablation, "--out", first, "--seeds", 1], FakeTrain())
    path = first / "records" / "wsd__seed0.json"
    rec = json.loads(path.read_text())
    key = rec["data_key"]  # '' here: the toy configs have no data section (stages test a real one)
    assert reuse.find_identical_run([first], rec["config"], "val_loss", documents=key)[0] == path
    assert reuse.find_identical_run([first], rec["config"], "val_loss", documents=key + "-v9") is None
    del rec["data_key"]
    path.write_text(json.dumps(rec))
    assert reuse.find_identical_run([first], rec["config"], "val_loss", documents=key) is None


def test_no_post_skips_the_post_hook(ablation, tmp_path):
    ablation.write_text(ablation.read_text().replace('"notes": "toy notes",',
                                                     '"notes": "toy notes", "post": "os:no_such"'))
    out = tmp_path / "out"
    rc, logs = cli([ablation, "--out", out, "--seeds", 1, "--no-post"], FakeTrain())
    assert rc == 0 and "os:no_such: not run (--no-post)" in logs
    with pytest.raises(AttributeError):      # without the flag the (missing) hook is called
        cli([ablation, "--out", out, "--seeds", 1, "--tables-only"])


def test_a_record_keeps_its_vocabulary_size_without_its_workdir(ablation, tmp_path):
    """Configs keep vocab_size 0 when the tokenizer sets it; the record stores the size the run resolved
    (its config.json), so a reused or copied record still gives it once its workdir is gone."""
    class TokenizerTrain(FakeTrain):
        def __call__(self, config, workdir):
            (Path(workdir) / "config.json").write_text(json.dumps({"model": {"vocab_size": 77}}))
            return super().__call__(config, workdir)
    load = config_loader({"seed": 0, "train": {"steps": 10, "schedule": "cosine"},
                          "model": {"d_model": 8, "vocab_size": 0}})
    out = tmp_path / "results" / "toy_a"
    cli([ablation, "--out", out, "--seeds", 1], TokenizerTrain(), load)
    rec = json.loads((out / "records" / "wsd__seed0.json").read_text())
    assert rec["config"]["model"]["vocab_size"] == 0 and rec["vocab_size"] == 77
    shutil.rmtree(out / "runs")
    assert runner.resolved_vocab_size(rec) == 77
    del rec["vocab_size"]
    with pytest.raises(UserError, match="vocabulary size unknown for the wsd seed 0 record"):
        runner.resolved_vocab_size(rec)
