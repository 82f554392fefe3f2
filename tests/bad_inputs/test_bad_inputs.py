"""Every bad input of the suite (one row each, in cases_*.py): exit code, one clear line, no traceback,
nothing under the row's directory changed. docs/testing.md says how to add a row."""
import importlib
import os
from pathlib import Path

import pytest
from harness import Bases, changed, check_output, prepare, run_main, snapshot

# Every row of every cases_<area>.py beside this file (a new area is a new file; nothing to register).
AREAS = sorted(p.stem for p in Path(__file__).parent.glob("cases_*.py"))
CASES = [case for area in AREAS for case in importlib.import_module(area).CASES]


@pytest.fixture(scope="session")
def bad_inputs_data(tmp_path_factory) -> Path:
    """EDGE_JAX_DATA for every row: the built-in corpus is prepared there once, outside the rows' dirs
    ($EDGE_JAX_TEST_DATA, as in tests/conftest.py, reuses a prepared one)."""
    given = os.environ.get("EDGE_JAX_TEST_DATA")
    return Path(given) if given else tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def bad_inputs_bases(tmp_path_factory, bad_inputs_data) -> Bases:
    """The session-built workdirs (harness.BASES), each trained on first use with the session's data dir."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGE_JAX_DATA", str(bad_inputs_data))
    yield Bases(tmp_path_factory.mktemp("bases"))
    mp.undo()


def test_row_names_are_unique():
    names = [c.name for c in CASES]
    assert len(AREAS) >= 6 and len(names) >= 60
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_input(case, tmp_path, bad_inputs_data, bad_inputs_bases, monkeypatch, capfd):
    monkeypatch.setenv("EDGE_JAX_DATA", str(bad_inputs_data))
    ctx = prepare(case, tmp_path, bad_inputs_data, bad_inputs_bases)
    argv = [ctx.fill(a) for a in case.argv]
    before = snapshot(tmp_path)
    capfd.readouterr()
    code = run_main(argv)
    out, err = capfd.readouterr()
    check_output(case, code, out, err)
    moved = changed(case, before, snapshot(tmp_path))
    assert not moved, f"files changed under {tmp_path}: {moved[:8]}"
    if case.check:
        case.check(ctx, out + err)
