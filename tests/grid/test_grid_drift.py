"""edge_jax.grid.drift: a table says which settings its records were made with when they differ from today's."""
import argparse
import json
import textwrap

from helpers import config_loader

from edge_jax.grid import command, drift, spec

BASE = {"seed": 0, "init_from": "", "eval": {"limit": 0}, "train": {"steps": 10, "schedule": "cosine"}}


def make_grid(base_overrides=None):
    return spec.validate_grid({
        "name": "toy", "title": "Toy", "base": "fake.py:tiny", "base_overrides": base_overrides or {},
        "cells": {"a": {"train.schedule": "wsd"}, "b": {"init_from": "{stage:pre}"}},
        "stages": {"pre": {"base": "fake.py:tiny"}},
        "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
        "paper": {"metric": "x", "values": {"a": 1.0, "b": 2.0}, "higher_is_better": True, "source": "Toy"},
        "notes": "today's notes",
    }, preset="tiny", path="ablations/toy.py")


def loader(base=None):
    return config_loader(base or BASE)


def record(grid, cell, seed, load, extra=None, stage_path="/runs/_stages/pre-1234/seed0"):
    """A record as the runner writes it: the overrides it resolved (stage paths filled in) and its config."""
    overrides = {**grid.overrides(cell, seed), **(extra or {})}
    overrides = {k: stage_path if v == "{stage:pre}" else v for k, v in overrides.items()}
    return {"grid": "toy", "preset": "tiny", "cell": cell, "seed": seed, "overrides": overrides,
            "config": load("fake.py:tiny", overrides).to_dict(), "metrics": {"val_loss": 2.0 + seed}}


def test_unchanged_settings_write_nothing():
    grid, load = make_grid(), loader()
    records = [record(grid, c, s, load) for c in ("a", "b") for s in (0, 1)]
    changes, compared = drift.changed_settings(grid, records, load)
    assert changes == {} and compared == 4       # the resolved stage path is not a change
    assert drift.changed_line(changes, compared) == ""


def test_an_override_the_grid_no_longer_sets_is_named_with_its_count():
    old, new = make_grid({"eval.limit": 400}), make_grid()
    load = loader()
    records = [record(old, c, s, load) for c in ("a", "b") for s in (0, 1, 2)]
    records.append(record(new, "a", 3, load))                 # one record made after the change
    changes, compared = drift.changed_settings(new, records, load)
    assert compared == 7 and dict(changes) == {"eval.limit": {("400", "0"): 6}}
    assert drift.changed_line(changes, compared) == (
        "**Records made with other settings than the grid runs today** (the notes describe today's): "
        "`eval.limit` 400 in 6 of 7 records (today 0).")


def test_a_changed_base_config_and_a_set_override_are_named():
    grid = make_grid()
    then = loader({**BASE, "train": {"steps": 20, "schedule": "cosine"}})
    records = [record(grid, "a", 0, then), record(grid, "b", 0, loader(), extra={"train.steps": 5})]
    changes, _ = drift.changed_settings(grid, records, loader())
    assert dict(changes) == {"train.steps": {("20", "10"): 1, ("5", "10"): 1}}


def test_records_that_cannot_be_compared_are_passed_over():
    grid, load = make_grid(), loader()
    good = record(grid, "a", 0, load)
    records = [good, {**good, "config": None}, {**good, "cell": "gone"}, {**good, "grid": "other"}]
    changes, compared = drift.changed_settings(grid, records, load)
    assert changes == {} and compared == 1

    def broken(spec_, overrides):
        raise ValueError("unknown config key 'train.schedule'")
    assert drift.changed_settings(grid, [good], broken) == ({}, 0)


def test_tables_only_writes_the_changed_settings_into_the_table(tmp_path):
    ablation = tmp_path / "toy.py"
    ablation.write_text(textwrap.dedent('''
        def get_grid(preset):
            return {"name": "toy", "title": "Toy", "base": "fake.py:tiny", "base_overrides": {},
                    "cells": {"a": {}, "b": {"train.schedule": "wsd"}}, "metric": "val_loss",
                    "lower_is_better": True, "extra_metrics": [],
                    "paper": {"metric": "x", "values": {"a": 1.0, "b": 2.0}, "higher_is_better": True,
                              "source": "Toy"},
                    "notes": "today's notes"}
    '''))
    out = tmp_path / "out"
    (out / "records").mkdir(parents=True)
    grid, load = spec.load_grid(ablation), loader()
    for cell in ("a", "b"):
        rec = record(grid, cell, 0, load, extra={"eval.limit": 400})
        (out / "records" / f"{cell}__seed0.json").write_text(json.dumps(rec))
    other_preset = {**record(grid, "a", 1, load, extra={"train.steps": 99}), "preset": "paper"}
    (out / "records" / "a__seed1.json").write_text(json.dumps(other_preset))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)

    def table(*flags):
        args = parser.parse_args([str(ablation), "--out", str(out), "--tables-only", "--seeds", "1", *flags])
        assert command.run(args, train_fn=None, load_config=load, log=lambda m: None) == 0
        return (out / "table.md").read_text()
    md = table()
    line = "`eval.limit` 400 in 2 of 2 records (today 0)."
    assert line in md and md.index(line) < md.index("Notes: today's notes") and "train.steps" not in md
    assert "other settings" not in table("--set", "eval.limit=400")     # the settings this command runs
