"""`edge-jax eval --tasks` on a trained workdir, the zero_shot evaluator after training, and their
one-line errors."""
import json
import os

import pytest

from edge_jax.cli import main
from edge_jax.config import ConfigError
from edge_jax.train.loop import train_and_evaluate

BUILTIN = ("facts_mc", "code_cloze", "longctx_mc")
SMALL = {"data.name": "pystdlib+facts", "data.facts_entities": 40, "data.seq_len": 128, "train.steps": 3}


@pytest.fixture
def workdir(tiny_config, tmp_path):
    wd = str(tmp_path / "run")
    result = train_and_evaluate(tiny_config(**SMALL, **{"eval.zero_shot": "builtin", "eval.limit": 8}), wd)
    return wd, result


def test_training_scores_the_zero_shot_tasks_and_the_cli_rescores_them(workdir, capsys):
    wd, result = workdir
    accs = [result[f"zero_shot/{t}"] for t in BUILTIN]
    assert all(0.0 <= a <= 1.0 for a in accs)
    assert result["zero_shot_avg"] == pytest.approx(sum(accs) / 3)
    after_training = {t: json.load(open(os.path.join(wd, "eval", f"{t}.json"))) for t in BUILTIN}
    assert all(r["n"] == 8 and r["chance"] == 0.25 and r["max_length"] == 128 for r in after_training.values())
    capsys.readouterr()
    assert main(["eval", "--workdir", wd, "--tasks", "builtin", "--limit", "8", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "| facts_mc |" in out and "| **average** |" in out and "zero_shot_avg=" in out
    rescored = {t: json.load(open(os.path.join(wd, "eval", f"{t}.json"))) for t in BUILTIN}
    for t in BUILTIN:  # the same params, documents and rules: the same accuracies
        assert rescored[t]["acc"] == after_training[t]["acc"] and rescored[t]["form"] == "train"
        assert rescored[t]["version"].startswith("edge_jax")


def test_cli_errors_are_one_line_and_write_nothing(workdir, capsys, tmp_path):
    wd, _ = workdir
    capsys.readouterr()
    cases = [
        (["--tasks", "facts_mcq"], "did you mean 'facts_mc'"),
        (["--tasks", "arc_easy"], "pass --data-dir DIR"),
        (["--tasks", "builtin,piqa", "--data-dir", str(tmp_path / "none")], "piqa: no 'validation' split at"),
        (["--tasks", "longctx_mc", "--num-fewshot", "1"], "longctx_mc has no split to draw few-shot"),
        (["--tasks", "facts_mc", "--num-fewshot", "-1"], "argument --num-fewshot: needs an integer >= 0, got -1"),
        (["--tasks", "code_cloze", "--no-truncate"], "is longer than the model's 128 and truncation is off"),
        (["--tasks", "facts_mc", "--fold"], "--fold: model.memory='none' has no inference form other than the trained"),
    ]
    before = sorted(os.listdir(os.path.join(wd, "eval")))
    for args, message in cases:
        assert main(["eval", "--workdir", wd, *args]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    assert sorted(os.listdir(os.path.join(wd, "eval"))) == before


def test_eval_config_errors(tiny_config, tmp_path):
    with pytest.raises(ConfigError, match="eval.zero_shot: unknown zero-shot task 'bogus'"):
        tiny_config(**{"eval.zero_shot": "bogus"})
    with pytest.raises(ConfigError, match="eval.batch_size=0 must be positive"):
        tiny_config(**{"eval.batch_size": 0})
    # file-backed tasks are checked before the first step: nothing is trained or written
    wd = tmp_path / "run"
    config = tiny_config(**SMALL, **{"eval.zero_shot": "boolq", "eval.data_dir": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="boolq: no 'validation' split at"):
        train_and_evaluate(config, str(wd))
    assert not (wd / "checkpoints").exists() or not os.listdir(wd / "checkpoints")
