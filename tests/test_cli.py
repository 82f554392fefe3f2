import importlib
import subprocess
import sys

import pytest

from edge_jax.cli import main


def test_unknown_config_key_is_one_line_exit_2(capsys, tmp_path):
    assert main(["train", "--config", "configs/lm.py:size=tiny", "--workdir", str(tmp_path / "x"),
                 "--config.train.stpes=3"]) == 2
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


@pytest.mark.subprocess
def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "edge_jax.cli", "--help"], capture_output=True, text=True, check=True)
    for cmd in ("train", "eval", "grid", "bench", "params"):
        assert cmd in out.stdout


def test_params_command(capsys):
    assert main(["params", "--config", "configs/lm.py:size=qwen3_0p6b"]) == 0
    assert "ours/paper" in capsys.readouterr().out


def test_paper_commands_and_analyses_come_from_the_registry():
    from edge_jax.cli import build_parser
    from edge_jax.registry import COMMANDS
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices)[:5] == ["train", "eval", "params", "grid", "bench"]
    for name in COMMANDS:
        group, _, leaf = name.rpartition(" ")
        assert leaf in (next(a for a in sub.choices[group]._actions if a.dest == "analysis").choices
                        if group else sub.choices)
    assert {"moe", "cache", "analyze logit-lens", "analyze kv-cache", "analyze sparsity"} <= set(COMMANDS)


def test_config_overrides_only_where_they_apply(capsys, tmp_path):
    assert main(["eval", "--workdir", str(tmp_path), "--config.train.steps=3"]) == 2
    assert capsys.readouterr().err.strip() == "edge-jax: error: --config.* overrides do not apply to `eval`"
    assert main(["grid", "ablations/plm_schedule.py", "--config.train.steps=3"]) == 2
    assert "use --set KEY=VALUE" in capsys.readouterr().err
    assert main(["analyze", "logit-lens", "--workdir", str(tmp_path), "--out", str(tmp_path),
                 "--config.train.steps=3"]) == 2
    assert "do not apply to `analyze`" in capsys.readouterr().err


def test_one_line_errors_are_user_errors():
    from edge_jax.data import DataError
    from edge_jax.data.routing_trace import TraceError
    from edge_jax.errors import ConfigError, UserError
    from edge_jax.papers.npumoe.calibrate import CalibrationError
    from edge_jax.train.loop import TrainingError
    for error in (ConfigError, DataError, CalibrationError, TraceError, TrainingError):
        assert issubclass(error, UserError), error


def test_bench_harness_reads_the_registry():
    import argparse

    from edge_jax.bench import command
    from edge_jax.registry import BENCHMARKS
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert {"train-step", "meki-decode", "mla-decode", "long-context", "moe", "cache-sim"} <= set(BENCHMARKS)
    groups = {g.title for g in parser._action_groups}
    assert set(BENCHMARKS) <= groups
    for name, bench in BENCHMARKS.items():
        args = parser.parse_args([name])
        assert args.repeats is None and args.chunk is None  # filled by run() from the benchmark's defaults
        assert set(bench.defaults) <= {"repeats", "chunk"}
    repeats = next(a for a in parser._actions if a.dest == "repeats")
    assert repeats.help == ("timed rounds (median reported; default 5, cache-sim 3, data 1, eval 3, import 1, "
                            "kernels 20, long-context 1, train-loop 3)")


def test_every_benchmark_names_a_function_that_runs_it():
    """A benchmark's declaration names its run ``"module:function"`` (imported when it runs): each names one."""
    from edge_jax.bench import Benchmark
    from edge_jax.registry import BENCHMARKS
    for name, bench in BENCHMARKS.items():
        module, _, function = bench.run.partition(":")
        assert callable(getattr(importlib.import_module(module), function, None)), (name, bench.run)
    with pytest.raises(ValueError, match="write 'module:function'"):
        Benchmark("help", "edge_jax.bench.train_step.run")
