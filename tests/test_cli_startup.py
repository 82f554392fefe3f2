"""The command line starts at once: ``--help`` of ``edge-jax`` and of every subcommand, and an argument
error, import neither JAX nor TFDS nor torch (nor TensorFlow). Each is checked in a fresh process, which then
reports the modules it imported; the time of ``edge-jax --help`` is measured and printed, not asserted (a
loaded machine would make a bound flaky; the bound is the import list)."""
import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.subprocess  # every test starts a fresh interpreter

HEAVY = ("jax", "tensorflow_datasets", "torch", "tensorflow")

# In a fresh process: run main(argv) for each argv (catching argparse's exit), then print one JSON line:
# per argv its exit status and what it printed, and the heavy modules imported by then.
PROBE = r"""
import contextlib, io, json, sys
from edge_jax.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
        try:
            status = main(argv)
        except SystemExit as e:
            status = e.code
    out.append([argv, status, text.getvalue()])
heavy = sorted(m for m in sys.modules if m.partition(".")[0] in json.loads(sys.argv[2]))
print(json.dumps({"runs": out, "heavy": heavy}))
"""

# Lists every command path (``[]``, ``["bench"]``, ``["analyze", "sparsity"]`` ...) of the parser.
WALK = r"""
import argparse, json
from edge_jax.cli import build_parser
def walk(parser, path):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, path + [name])
print(json.dumps(list(walk(build_parser(), []))))
"""


def _python(*args) -> str:
    """Run ``python *args`` as a user's shell would (no ``JAX_PLATFORMS``: conftest's setting would skip the
    CLI's platform check, which must not import JAX either); its last line of output."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _probe(argvs: list[list[str]]) -> dict:
    return json.loads(_python("-c", PROBE, json.dumps(argvs), json.dumps(HEAVY)))


@pytest.fixture(scope="module")
def paths() -> list[list[str]]:
    return json.loads(_python("-c", WALK))


def test_the_walk_finds_the_nested_commands(paths):
    for path in (["bench"], ["compile"], ["launch"], ["summary"], ["data", "prepare"], ["hf", "import"],
                 ["moe", "calibrate"], ["cache", "run"], ["analyze", "sparsity"], ["analyze", "logit-lens"]):
        assert path in paths, path


def test_help_of_every_command_imports_no_jax_tfds_or_torch(paths):
    report = _probe([[*path, "--help"] for path in paths])
    for argv, status, text in report["runs"]:
        assert status == 0 and text.startswith("usage: edge-jax"), (argv, status, text[:300])
    assert report["heavy"] == [], report["heavy"]


def test_an_argument_error_is_one_line_without_jax():
    report = _probe([["bench", "no-such-benchmark"], ["train", "--config"], ["compile", "--config", "c.py"]])
    for argv, status, text in report["runs"]:
        assert status == 2 and text.startswith("edge-jax: error: ") and text.count("\n") == 1, (argv, status, text)
    assert report["heavy"] == [], report["heavy"]


def test_help_as_a_program_imports_no_jax_and_its_time_is_printed():
    """``python -m edge_jax.cli --help``, the console script's path (its own ``__main__``, its argv)."""
    code = ("import json, runpy, sys; sys.argv = ['edge-jax', '--help']\n"
            "try:\n    runpy.run_module('edge_jax.cli', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] in {HEAVY!r})))")
    start = time.perf_counter()
    heavy = json.loads(_python("-c", code))
    print(f"edge-jax --help: {time.perf_counter() - start:.2f} s wall (a process, interpreter start included)")
    assert heavy == []
