"""`edge-jax grid`: every argument is checked before anything runs; a bad one is one line on stderr naming
the flag (or the ablation file) and the fix, exit status 2, and nothing is written under --out."""
import textwrap
from pathlib import Path

import pytest

from edge_jax.cli import main

REPO = Path(__file__).resolve().parents[2]
ABLATION = '''
PRESETS = ("tiny", "paper")

def get_grid(preset):
    return {{
        "name": "argcheck", "title": "t", "base": "{base}",
        "base_overrides": {{"train.steps": 30, "train.warmup_steps": 3}},
        "cells": {cells}, "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
        "paper": {{"metric": "m", "values": {{}}, "higher_is_better": True, "source": "s"}}, "notes": "",
    }}
'''
CELLS = {"cosine": {"train.schedule": "cosine"}, "wsd": {"train.schedule": "wsd"}}


def write_ablation(path: Path, cells: dict = CELLS) -> Path:
    path.write_text(textwrap.dedent(ABLATION.format(base=f"{REPO}/configs/lm.py:size=tiny", cells=cells)))
    return path


@pytest.fixture
def ablation(tmp_path):
    return write_ablation(tmp_path / "argcheck.py")


def refused(argv, capsys) -> str:
    """The one stderr line of ``edge-jax grid ARGV``, which must exit 2."""
    capsys.readouterr()
    assert main(["grid", *map(str, argv)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edge-jax: error: "), lines
    return lines[0][len("edge-jax: error: "):]


@pytest.mark.parametrize("sets, message", [
    (["train.stesp=30"], "--set: unknown config key 'train.stesp'; did you mean 'train.steps'"),
    (["train.schedule=bogus"], "--set: unknown train.schedule value 'bogus'"),
    (["train.steps=20", "train.warmup_steps=25"], "--set: train.warmup_steps=25 must be below train.steps=20"),
    (["noequals"], "--set expects KEY=VALUE, got 'noequals'; e.g. --set train.steps=200"),
    (["seed=1"], "--set seed=... is not allowed; use --seeds"),
])
def test_a_bad_set_is_refused_before_anything_is_written(ablation, tmp_path, capsys, sets, message):
    out = tmp_path / "out"
    argv = [ablation, "--out", out, "--seeds", 2]
    for s in sets:
        argv += ["--set", s]
    err = refused(argv, capsys)
    assert err.startswith(message)
    if message.startswith("--set:"):
        assert err.endswith(f"(in cell 'cosine' of {ablation}, preset 'tiny')")
    assert not out.exists()


def test_a_set_typo_on_a_real_ablation_file_writes_no_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "results" / "plm_schedule"
    err = refused(["ablations/plm_schedule.py", "--out", out, "--set", "train.stesp=30"], capsys)
    assert err.startswith("--set: unknown config key 'train.stesp'; did you mean 'train.steps'")
    assert not out.exists() and not (tmp_path / "results").exists()


def test_a_bad_cell_of_the_ablation_file_is_named_with_its_fix(tmp_path, capsys):
    path = write_ablation(tmp_path / "argcheck.py", {**CELLS, "bad": {"model.nope": 1}})
    out = tmp_path / "out"
    err = refused([path, "--out", out, "--set", "train.steps=40"], capsys)
    assert err.startswith(f"cell 'bad' of {path}, preset 'tiny': unknown config key 'model.nope'")
    assert err.endswith("; fix the ablation file") and not out.exists()
    assert main(["grid", str(path), "--out", str(out), "--list"]) == 0   # --list loads no config


def test_an_unknown_preset_is_named_with_the_files_presets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    err = refused(["ablations/plm_activation.py", "--preset", "foo", "--out", tmp_path / "out"], capsys)
    assert err == "unknown preset 'foo' of ablations/plm_activation.py; presets: tiny, paper"
    err = refused(["ablations/cache_policies.py", "--preset", "paper", "--out", tmp_path / "out"], capsys)
    assert err == "unknown preset 'paper' of ablations/cache_policies.py; presets: tiny"
    assert not (tmp_path / "out").exists()


def test_a_preset_the_file_does_not_list(ablation, tmp_path, capsys):
    err = refused([ablation, "--preset", "huge", "--out", tmp_path / "out"], capsys)
    assert err == f"unknown preset 'huge' of {ablation}; presets: tiny, paper"


def test_ablation_files_that_cannot_be_loaded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    err = refused(["ablations/plm_activaton.py", "--out", out], capsys)
    assert err.startswith("ablation file 'ablations/plm_activaton.py' not found; did you mean "
                          "'ablations/plm_activation.py'")
    err = refused([tmp_path / "nowhere" / "x.py", "--out", out], capsys)
    assert err.endswith("not found; give the path of a .py file, e.g. ablations/NAME.py")
    assert refused(["ablations", "--out", out], capsys).startswith("ablation file 'ablations' is a directory; give")
    (tmp_path / "grid.yaml").write_text("cells: {}\n")
    err = refused([tmp_path / "grid.yaml", "--out", out], capsys)
    assert err.startswith(f"ablation file '{tmp_path / 'grid.yaml'}' is not a Python file (.py); give one")
    (tmp_path / "broken.py").write_text("import no_such_module_xyz\n")
    err = refused([tmp_path / "broken.py", "--out", out], capsys)
    assert err == (f"{tmp_path / 'broken.py'}: import failed: ModuleNotFoundError: No module named "
                   "'no_such_module_xyz'; fix the file, or install what it imports")
    (tmp_path / "syntax.py").write_text("def get_grid(preset:\n")
    assert "import failed: SyntaxError" in refused([tmp_path / "syntax.py", "--out", out], capsys)
    (tmp_path / "empty.py").write_text("X = 1\n")
    assert refused([tmp_path / "empty.py", "--out", out], capsys).endswith(
        "defines no get_grid(preset) function; add one (docs/grids.md)")
    assert not out.exists()


def test_an_out_that_is_a_file_or_not_writable(ablation, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep\n")
    err = refused([ablation, "--out", afile], capsys)
    assert err == f"--out '{afile}' is a file, not a directory; give a directory path"
    assert refused([ablation, "--out", afile / "sub"], capsys).startswith(f"--out '{afile / 'sub'}' lies under")
    assert afile.read_text() == "keep\n"
    for flags in (["--tables-only"], ["--cell", "0"]):
        assert "is a file, not a directory" in refused([ablation, "--out", afile, *flags], capsys)
    if Path("/proc").is_dir():   # not writable whoever runs the test (the superuser too)
        err = refused([ablation, "--out", "/proc/edge_jax_grid_out"], capsys)
        assert err.startswith("--out '/proc/edge_jax_grid_out': '/proc' is not writable here; choose a writable")


def test_cell_out_of_range_and_flags_of_another_mode(ablation, tmp_path, capsys):
    out = tmp_path / "out"
    err = refused([ablation, "--out", out, "--seeds", 3, "--cell", 6], capsys)
    assert err == "--cell 6 out of range; valid: 0..5 (2 cells x 3 seeds; see --list)"
    err = refused([ablation, "--out", out, "--topology", "cpu:8"], capsys)
    assert err == "--topology, --slices and --mesh apply only with --compile-only; add it or drop them"
    err = refused([ablation, "--out", out, "--compile-only"], capsys)
    assert err.startswith("--compile-only needs --topology")
    err = refused([ablation, "--out", out, "--compile-only", "--topology", "cpu:8", "--set", "train.stesp=3"],
                  capsys)
    assert err.startswith("--set: unknown config key 'train.stesp'")
    assert not out.exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--seeds", "0", "argument --seeds: needs an integer >= 1, got 0"),
    ("--seeds", "two", "argument --seeds: needs an integer, got 'two'"),
    ("--cell", "-1", "argument --cell: needs an integer >= 0, got -1"),
    ("--slices", "0", "argument --slices: needs an integer >= 1, got 0"),
])
def test_bad_numbers_are_refused_naming_the_flag(ablation, tmp_path, capsys, flag, value, message):
    out = tmp_path / "out"
    assert refused([ablation, "--out", out, flag, value], capsys).startswith(message)
    assert not out.exists()
