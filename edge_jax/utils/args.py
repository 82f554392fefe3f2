"""Command-line values checked before any work starts: counts, ratios, and directories.

The number checks are argparse ``type=`` callables, so a bad value is argparse's one-line usage
error naming the flag (exit 2)::

    p.add_argument("--seeds", type=count, default=3)          # an integer >= 1
    p.add_argument("--limit", type=at_least(0), default=0)    # an integer >= 0 (0 = all)
    p.add_argument("--vram", type=ratio, default=0.2)         # a number in (0, 1]
    p.add_argument("--zipf", type=non_negative, default=1.0)  # a number >= 0

The path checks run inside a command, before it writes anything, and raise a
:class:`edge_jax.errors.UserError` naming the flag and the fix::

    output_dir(args.out, "--out")        # a directory that exists or can be made, and is writable
    output_file(args.json, "--json")     # a file path whose directory exists or can be made, and is writable
    input_dir(args.workdir, "--workdir")  # an existing directory

``edge-jax``'s parser raises :class:`UsageError` for what argparse refuses, so that too is one line.
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path

from edge_jax.errors import UserError


class PathArgError(UserError, ValueError):
    """A path given on the command line cannot be used as asked (one line naming the flag and the fix)."""


class UsageError(UserError):
    """A command line argparse refused (an unknown flag, a missing or malformed value), as one line."""


def at_least(low: int):
    """An argparse type: an integer >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"needs an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"needs an integer >= {low}, got {value}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its message
    parse.low = low
    return parse


count = at_least(1)


def _number(text: str, accept, want: str) -> float:
    """``text`` as a finite number that ``accept`` takes, else argparse's one-line refusal naming ``want``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs {want}, got {text!r}") from None
    if not (math.isfinite(value) and accept(value)):
        raise argparse.ArgumentTypeError(f"needs {want}, got {text}")
    return value


def positive(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _number(text, lambda v: v > 0, "a finite number > 0")


def non_negative(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    return _number(text, lambda v: v >= 0, "a finite number >= 0")


def ratio(text: str) -> float:
    """An argparse type: a number in (0, 1]."""
    return _number(text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def output_dir(path: str | os.PathLike, flag: str) -> Path:
    """``path`` as a directory this process may write into: an existing writable directory, or one
    that can be made (its nearest existing parent is a writable directory). Nothing is created. A bucket's
    (``gs://``): the bucket exists and this account may list it (:func:`edge_jax.utils.storage.ensure_usable`)."""
    from edge_jax.utils import storage
    if storage.is_remote(path):
        storage.ensure_usable(str(path))
        return storage.path(path)
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PathArgError(f"{flag} {str(path)!r} is a file, not a directory; give a directory path")
    _check_can_make(p, path, flag)
    return p


def new_output_dir(path: str | os.PathLike, flag: str) -> Path:
    """:func:`output_dir` that must not hold anything yet (absent or empty): a command writing a whole
    directory (an import, an export) never mixes its files with another run's (in a bucket: no object
    under the prefix)."""
    p = output_dir(path, flag)
    if p.is_dir() and any(p.iterdir()):
        raise PathArgError(f"{flag} {str(path)!r} already exists and is not empty (it may hold another run); "
                           "pass a new directory")
    return p


def output_file(path: str | os.PathLike, flag: str) -> Path:
    """``path`` as a file this process may write: not a directory, in a directory that exists or can
    be made and is writable. Nothing is created."""
    p = Path(path)
    if p.is_dir():
        raise PathArgError(f"{flag} {str(path)!r} is a directory; give a file path")
    _check_can_make(p.parent, path, flag)
    return p


def _check_can_make(p: Path, path, flag: str) -> None:
    """Whether ``p`` exists as a writable directory or can be made as one."""
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise PathArgError(f"{flag} {str(path)!r} lies under {str(probe)!r}, which is a file; give a path "
                           "under a directory")
    if not _writable(probe):
        raise PathArgError(f"{flag} {str(path)!r}: {str(probe)!r} is not writable here; choose a writable "
                           "directory or fix its permissions")


def _writable(directory: Path) -> bool:
    """Whether a file can be made in ``directory`` (tried, since permissions, read-only mounts and
    the superuser all answer differently)."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".edge_jax-write-probe-")
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def input_dir(path: str | os.PathLike, flag: str, fix: str = "check the path") -> Path:
    """``path`` as an existing directory to read (``fix``: what the message tells a user whose path
    does not exist); a bucket's (``gs://``) exists when an object is under it."""
    from edge_jax.utils.storage import path as storage_path
    p = storage_path(path)
    if not p.exists():
        raise PathArgError(f"{flag} {str(path)!r} does not exist; {fix}")
    if not p.is_dir():
        raise PathArgError(f"{flag} {str(path)!r} is a file, not a directory; give a directory path")
    return p


def trained_workdir(path: str | os.PathLike, flag: str = "--workdir") -> Path:
    """``path`` as an existing directory to read a trained run from (its config.json and checkpoints
    are checked where they are read)."""
    return input_dir(path, flag, fix="give the workdir of a run of `edge-jax train`")
