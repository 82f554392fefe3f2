"""Command arguments are checked before any work starts: a bad one exits 2 with one line on stderr
that names the flag (grid and summary, edge_jax/grid, have their own tests)."""
import argparse
import json
import os

import pytest

from edge_jax.cli import build_parser, main
from edge_jax.utils.args import non_negative, positive, ratio

TINY = "configs/lm.py:size=tiny"
OWN_TESTS = ("grid", "summary")  # edge_jax/grid: tests/grid


def _leaves(parser, path=()):
    """``(argv prefix, parser)`` of every leaf command."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from _leaves(child, path + (name,))


def _numeric_flags():
    """``(argv, flag)`` per numeric flag of every command: the flag given a value below its range."""
    out = []
    for path, parser in _leaves(build_parser()):
        if path[0] in OWN_TESTS:
            continue
        positional = [a.choices[0] if isinstance(a.choices, list) else sorted(a.choices)[0]
                      for a in parser._actions if not a.option_strings and a.choices and a.nargs is None]
        for action in parser._actions:
            bad = {ratio: ["0", "1.5"], positive: ["0"], non_negative: ["-1"]}.get(action.type)
            if hasattr(action.type, "low"):
                bad = [str(action.type.low - 1), "x"]
            flag = action.option_strings[0] if bad else None
            for value in bad or ():
                out.append(pytest.param([*path, *positional, flag, value], flag, id=" ".join([*path, flag, value])))
    return out


def _one_line(capsys, *needles):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("edge-jax: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def test_every_numeric_flag_has_a_checked_type():
    plain = [f"{' '.join(path)} {a.option_strings[0]}" for path, parser in _leaves(build_parser())
             if path[0] not in OWN_TESTS for a in parser._actions if a.type in (int, float)]
    assert plain == []


@pytest.mark.parametrize("argv,flag", _numeric_flags())
def test_a_number_out_of_range_is_one_line(argv, flag, capsys):
    assert main(argv) == 2
    _one_line(capsys, f"argument {flag}:")


def test_the_numeric_flags_are_many():  # the walk above finds the commands' flags, not none
    flags = {p.values[1] for p in _numeric_flags()}
    assert {"--repeats", "--vram", "--zipf", "--processes", "--batches", "--limit", "--slices", "--tokens"} <= flags


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "eval").write_text("x")  # where eval --tasks writes its scores
    return {"tmp": str(tmp_path), "file": str(tmp_path / "afile"), "dir": str(tmp_path / "run"),
            "new": str(tmp_path / "new")}


def _fill(argv, paths, **more):
    return [a.format(**paths, **more) for a in argv]


def _ids(value):
    """A parametrize id: a command's first two words, or the flag."""
    return " ".join(value[:2]) if isinstance(value, list) else value


OUTPUT_DIRS = [  # (argv, flag); {out} is the directory the command would write
    (["train", "--config", TINY, "--workdir", "{out}"], "--workdir"),
    (["cache", "run", "--config", "configs/cache.py", "--workdir", "{out}"], "--workdir"),
    (["analyze", "logit-lens", "--workdir", "{dir}", "--out", "{out}"], "--out"),
    (["analyze", "sparsity", "--workdir", "{dir}", "--out", "{out}"], "--out"),
    (["moe", "calibrate", "--workdir", "{dir}", "--out", "{out}"], "--out"),
    (["moe", "trace", "--workdir", "{dir}", "--out", "{out}"], "--out"),
    (["bench", "data", "--corpus-dir", "{out}"], "--corpus-dir"),
]


@pytest.mark.parametrize("argv,flag", OUTPUT_DIRS, ids=_ids)
def test_a_file_given_as_an_output_directory_is_one_line(argv, flag, paths, capsys):
    assert main(_fill(argv, paths, out=paths["file"])) == 2
    _one_line(capsys, flag, "is a file, not a directory")
    assert main(_fill(argv, paths, out=paths["file"] + "/sub")) == 2
    _one_line(capsys, flag, "which is a file")
    assert sorted(os.listdir(paths["tmp"])) == ["afile", "run"]


def _proc_is_read_only() -> bool:
    try:
        open("/proc/1/edge-jax-probe", "w").close()
    except OSError:
        return True
    return False


@pytest.mark.skipif(not _proc_is_read_only(), reason="/proc/1 is writable here")
@pytest.mark.parametrize("argv,flag", OUTPUT_DIRS + [(["eval", "--workdir", "/proc/1", "--tasks", "facts_mc"],
                                                      "--workdir")],
                         ids=_ids)
def test_a_directory_nobody_can_write_is_one_line(argv, flag, paths, capsys):
    """/proc/1 refuses new files even to the superuser, for whom permission bits do not."""
    assert main(_fill(argv, paths, out="/proc/1/w")) == 2
    _one_line(capsys, flag, "is not writable here")


def test_eval_tasks_checks_where_it_writes(paths, capsys):
    assert main(["eval", "--workdir", paths["dir"], "--tasks", "facts_mc"]) == 2
    _one_line(capsys, "--workdir", "/run/eval", "is a file, not a directory")


OUTPUT_FILES = [
    (["bench", "kernels", "--json", "{out}"], "--json"),
    (["bench", "long-context", "--lengths", "512", "--plot", "{out}"], "--plot"),
    (["cache", "synth", "--out", "{out}"], "--out"),
]


@pytest.mark.parametrize("argv,flag", OUTPUT_FILES, ids=_ids)
def test_a_directory_given_as_an_output_file_is_one_line(argv, flag, paths, capsys):
    assert main(_fill(argv, paths, out=paths["dir"])) == 2
    _one_line(capsys, flag, "is a directory; give a file path")
    assert main(_fill(argv, paths, out=paths["file"] + "/x.out")) == 2
    _one_line(capsys, flag, "which is a file")


INPUT_DIRS = [
    ["eval", "--workdir", "{src}"],
    ["eval", "--workdir", "{src}", "--tasks", "facts_mc"],
    ["analyze", "logit-lens", "--workdir", "{src}", "--out", "{new}"],
    ["analyze", "sparsity", "--workdir", "{dir}", "--workdir", "{src}", "--out", "{new}"],
    ["moe", "calibrate", "--workdir", "{src}"],
    ["moe", "trace", "--workdir", "{src}", "--out", "{new}"],
]


@pytest.mark.parametrize("argv", INPUT_DIRS, ids=lambda v: " ".join(v[:2]))
def test_a_missing_or_file_workdir_to_read_is_one_line(argv, paths, capsys):
    assert main(_fill(argv, paths, src=paths["new"] + "/run")) == 2
    _one_line(capsys, "--workdir", "does not exist; give the workdir of a run of `edge-jax train`")
    assert main(_fill(argv, paths, src=paths["file"])) == 2
    _one_line(capsys, "--workdir", "is a file, not a directory")
    assert not os.path.exists(paths["new"])


def test_eval_of_a_directory_without_a_run_still_says_train_first(paths, capsys):
    assert main(["eval", "--workdir", paths["new"].replace("new", "run")]) == 2
    _one_line(capsys, "config.json not found", "run `edge-jax train` first")


def test_bench_json_holds_the_report_and_where_it_came_from(tmp_path):
    from edge_jax.bench import command as bench_command
    path = tmp_path / "x.json"
    bench_command.write_result(str(path), "ratio 0.98", measured=False)
    out = json.loads(path.read_text())
    assert out["report"] == "ratio 0.98" and "result" not in out
    prov = out["provenance"]
    assert prov["command"] and prov["date"].endswith("+00:00") and prov["device"]["platform"] == "cpu"
    assert {"commit", "dirty"} <= set(prov["git"]) and prov["host"]["cpus"] >= 1
    path.write_text(json.dumps({"ratio": 0.98}))  # what a benchmark that measures into --json wrote
    bench_command.write_result(str(path), "ratio 0.98", measured=True)
    assert json.loads(path.read_text())["result"] == {"ratio": 0.98}


def test_usage_errors_are_one_line(capsys):
    assert main(["train", "--config", TINY]) == 2
    _one_line(capsys, "required: --workdir", "`edge-jax train --help`")
    assert main(["bench", "nosuch"]) == 2
    _one_line(capsys, "invalid choice: 'nosuch'", "train-step")
    assert main(["params", "--config", TINY, "--bogus"]) == 2
    _one_line(capsys, "unrecognized arguments: --bogus")


@pytest.mark.parametrize("argv,needles", [
    (["params", "--config", "configs/nope.py"], ["configs/nope.py", "not found"]),
    (["bench", "data", "--sizes", "1Q"], ["argument --sizes:", "100M,1G,3G"]),
    (["bench", "data", "--formats", "csv"], ["argument --formats:", "jsonl,parquet"]),
    (["bench", "data", "--workers", "1,-1"], ["argument --workers:"]),
    (["compile", "--config", TINY, "--topology", "cpu:x"], ["'cpu:x'", "cpu:N"]),
    (["compile", "--config", TINY, "--topology", "cpu:1", "--mesh", "fsdp=0"], ["--mesh", "AXIS=SIZE"]),
    (["compile", "--config", TINY, "--topology", "cpu:1", "--mesh", "fsdp=--4"], ["--mesh", "AXIS=SIZE"]),
    (["launch", "--processes", "2"], ["needs a command after --"]),
], ids=lambda v: " ".join(v[:4]) if isinstance(v, list) and v and v[0] in ("params", "bench", "compile", "launch")
   else None)
def test_other_bad_arguments_are_one_line(argv, needles, capsys):
    assert main(argv) == 2
    _one_line(capsys, *needles)


@pytest.mark.parametrize("content,needle", [(b"", "is empty (0 bytes), not a parquet file"),
                                            (b"text, not parquet\n", "is not a parquet file")])
def test_a_file_that_is_not_parquet_is_one_line(content, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EDGE_JAX_DATA", str(tmp_path / "data"))
    (tmp_path / "corpus").mkdir()
    bad = tmp_path / "corpus" / "part-0.parquet"
    bad.write_bytes(content)
    assert main(["data", "prepare", "--config", TINY, f"--config.data.name=parquet:{tmp_path}/corpus/*.parquet",
                 f"--config.data.tokens_dir={tmp_path}/tokens"]) == 2
    _one_line(capsys, str(bad), needle, "download it again")
