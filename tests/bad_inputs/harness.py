"""The bad-input suite's row format and the checks every row goes through.

A row (:class:`Case`) is one command a new user could type with one bad input. ``test_bad_inputs.py``
runs each row in-process through ``edge_jax.cli.main`` and asserts: the exit code, a phrase in the
output, no traceback, a refusal's error on ONE line, and, unless the row says files may change, that
no file under the row's directory changed (paths, sizes and contents; ``.git`` folders aside).

Placeholders in ``argv`` (and for the row's ``setup``/``check``, the same paths on :class:`Ctx`):

    {tmp}      the row's own directory (watched: snapshot before and after)
    {workdir}  {tmp}/run: absent (a new run's workdir)
    {base}     {tmp}/base: a copy of the session-built workdir the row names as its ``base`` (to resume,
               evaluate, init_from), absent otherwise
    {data}     the session's data dir (EDGE_JAX_DATA; outside {tmp}, shared by all rows)
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Sequence

import pytest
from conftest import tiny_overrides

TINY_CONFIG = "configs/lm.py:size=tiny"
# The tiny run of tests/conftest.py (seconds to train), 8 steps with checkpoints at steps 4 and 8, as
# --config.* flags; a row adds its own after them (a later override of a key wins).
TINY_OVERRIDES = tiny_overrides(**{"train.steps": 8, "train.eval_every": 4, "train.eval_batches": 1})
TINY = tuple(f"--config.{k}={v}" for k, v in TINY_OVERRIDES.items())
# An error line: `edge-jax: error: ...`, argparse's `edge-jax train: error: ...`, grid's `error: ...`.
ERROR_LINE = re.compile(r"^(edge-jax[\w -]*: )?error: ")


@dataclasses.dataclass(frozen=True)
class Ctx:
    """The paths of one row's run (see the module docstring's placeholders)."""
    tmp: Path
    workdir: Path
    base: Path
    data: Path

    def fill(self, text: str) -> str:
        for key in ("tmp", "workdir", "base", "data"):
            text = text.replace("{" + key + "}", str(getattr(self, key)))
        return text


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input.

    ``says``: a phrase, or a tuple of phrases, the output must contain on one line (a refusal: its one
    error line; a fallback: exactly one output line, its warning). ``code``: the exit status (2: a
    one-line refusal; 0: a fallback that goes on, with at most one ``warning: `` line). ``base``: a
    session-built workdir (:data:`BASES`) copied to {base} first. ``setup(ctx)`` makes the bad input;
    ``check(ctx, out)`` asserts more after the run (``out``: stdout + stderr). ``changes``: which files
    under {tmp} may change: False (none: a refusal leaves everything as it found it), a tuple of fnmatch
    patterns relative to {tmp} (only those, e.g. ``("run/config.json",)``) or True (any: a fallback that
    moves a bad step aside and trains on). ``slow``: marked slow (left out of the default run)."""
    name: str
    argv: Sequence[str]
    says: str | tuple[str, ...]
    code: int = 2
    base: str | None = None
    setup: Callable[[Ctx], None] | None = None
    check: Callable[[Ctx, str], None] | None = None
    changes: bool | tuple[str, ...] = False
    slow: bool = False

    def param(self):
        return pytest.param(self, id=self.name, marks=[pytest.mark.slow] if self.slow else [])


def train(*extra: str, workdir: str = "{workdir}", config: str = TINY_CONFIG) -> list[str]:
    """``edge-jax train`` of the tiny run into ``workdir``, with ``extra`` flags after the tiny ones."""
    return ["train", "--config", config, "--workdir", workdir, *TINY, *extra]


def params(config: str = TINY_CONFIG, *extra: str) -> list[str]:
    return ["params", "--config", config, *extra]


# --- the workdirs rows start from, built once per session on first use ------------------------------

def _trained(where: Path) -> None:
    """The tiny run, 8 steps, checkpoints at steps 4 and 8."""
    from edge_jax.cli import main
    assert main(train(workdir=str(where))) == 0


BASES: dict[str, Callable[[Path], None]] = {"trained": _trained}


class Bases:
    """Session cache of the :data:`BASES` workdirs (each built on first use; rows get copies)."""

    def __init__(self, root: Path):
        self.root, self._built = root, {}

    def get(self, name: str) -> Path:
        if name not in self._built:
            where = self.root / name
            BASES[name](where)
            self._built[name] = where
        return self._built[name]


# --- setups: make a bad input (``setup=...`` of a row) ----------------------------------------------

def write_file(rel: str, content: str | bytes = ""):
    """setup: a file at {tmp}/``rel`` (its folders made) holding ``content`` (empty by default)."""
    def setup(ctx):
        path = ctx.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return setup


def make_dir(rel: str):
    """setup: an empty folder at {tmp}/``rel``."""
    def setup(ctx):
        (ctx.tmp / rel).mkdir(parents=True)
    return setup


def both(*setups):
    """setup: several setups in order."""
    def setup(ctx):
        for s in setups:
            s(ctx)
    return setup



def state_files(workdir: Path, step: int) -> list[Path]:
    """The files of a checkpoint step's saved train state, largest first."""
    root = workdir / "checkpoints" / str(step) / "state"
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"no state files in {root}"
    return sorted(files, key=lambda p: (-p.stat().st_size, str(p)))


def truncate(step: int, *, where: str = "base"):
    """setup: cut every array data file of the step's train state to half its length."""
    def setup(ctx):
        for path in state_files(getattr(ctx, where), step):
            if path.parent.name == "d":
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return setup


def delete_part(step: int, *, where: str = "base"):
    """setup: delete the largest array data file of the step's train state."""
    def setup(ctx):
        next(p for p in state_files(getattr(ctx, where), step) if p.parent.name == "d").unlink()
    return setup


def randomize(step: int, *, where: str = "base"):
    """setup: overwrite every file of the step's train state with seeded random bytes of the same length."""
    def setup(ctx):
        import numpy as np
        rng = np.random.default_rng(step)
        for path in state_files(getattr(ctx, where), step):
            path.write_bytes(rng.integers(0, 256, max(path.stat().st_size, 16), dtype=np.uint8).tobytes())
    return setup


# --- the checks --------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and link under ``root`` (``.git`` folders aside) with its size and sha1. Folders are not
    listed: an empty folder left behind (a workdir made before a refusal) changes no file."""
    found = {}
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for f in files:
            path = os.path.join(here, f)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
                continue
            with open(path, "rb") as fh:
                found[rel] = ("file", os.path.getsize(path), hashlib.sha1(fh.read()).hexdigest())
    return found


def changed(case: "Case", before: dict, after: dict) -> list[str]:
    """The files added, removed or altered between two snapshots that the row does not allow to change."""
    if case.changes is True:
        return []
    allowed = case.changes or ()
    return sorted(p for p in set(before) | set(after)
                  if before.get(p) != after.get(p) and not any(fnmatch.fnmatch(p, a) for a in allowed))


def run_main(argv: list[str]) -> int:
    """``edge_jax.cli.main(argv)``; argparse's SystemExit becomes its code. Any other exception escapes
    (a traceback: the row fails)."""
    from edge_jax.cli import main
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


def prepare(case: Case, tmp: Path, data: Path, bases: Bases) -> Ctx:
    ctx = Ctx(tmp=tmp, workdir=tmp / "run", base=tmp / "base", data=data)
    if case.base:
        shutil.copytree(bases.get(case.base), ctx.base, symlinks=True)
    if case.setup:
        case.setup(ctx)
    return ctx


def check_output(case: Case, code: int, out: str, err: str) -> None:
    both = out + err
    assert code == case.code, f"exit {code}, expected {case.code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in both, f"a traceback was printed:\n{both}"
    says = (case.says,) if isinstance(case.says, str) else case.says
    own_warnings = [line for line in both.splitlines() if line.startswith("warning: ")]
    assert len(own_warnings) <= 1, f"more than one warning:\n{both}"
    if case.code == 0:
        hits = [line for line in both.splitlines() if all(p in line for p in says)]
        assert len(hits) == 1, f"{says!r} on {len(hits)} lines, expected one:\n{both}"
        return
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if ERROR_LINE.match(line)]
    assert len(errors) == 1, f"expected one error line on stderr, got {len(errors)}:\n{err}"
    assert errors[0] == len(lines) - 1, f"the error line is not the last on stderr:\n{err}"
    assert all(p in lines[-1] for p in says), f"{says!r} not in the error line: {lines[-1]!r}"
    before = lines[:-1]   # only argparse's usage may come before its error
    assert all(line.startswith(("usage: ", " ")) for line in before), f"more than the error on stderr:\n{err}"
