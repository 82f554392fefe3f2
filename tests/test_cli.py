import subprocess
import sys

from edge_jax.cli import main


def test_unknown_config_key_is_one_line_exit_2(capsys):
    assert main(["train", "--config", "configs/lm.py:size=tiny", "--workdir", "/tmp/x", "--config.train.stpes=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("edge-jax: error: unknown config key 'train.stpes'") and "train.steps" in err
    assert "\n" not in err


def test_unknown_dataset_and_missing_tokenizer_are_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_JAX_DATA", str(tmp_path))
    base = ["train", "--config", "configs/lm.py:size=tiny", "--workdir", str(tmp_path / "w")]
    assert main(base + ["--config.data.name=pystdlb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pystdlib" in err and "\n" not in err
    assert main(base + [f"--config.data.tokenizer=spm_file:{tmp_path}/nope.model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope.model" in err and "\n" not in err


def test_eval_without_workdir_is_one_line(capsys, tmp_path):
    assert main(["eval", "--workdir", str(tmp_path)]) == 2
    assert "edge-jax train" in capsys.readouterr().err


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("train", "eval", "grid", "bench", "params"):
        assert cmd in out.stdout


def test_params_command(capsys):
    assert main(["params", "--config", "configs/lm.py:size=qwen3_0p6b"]) == 0
    assert "ours/paper" in capsys.readouterr().out
