"""Exclusive locks on grid work, one lock file beside the workdir it guards:

    OUT/runs/<cell>/seed<s>.lock                   a unit (cell x seed): :func:`try_locked`, a busy one is skipped
    <results>/_stages/<name>-<hash>/seed<s>.lock   a stage run: :func:`locked`, a busy one is waited for

A lock is ``fcntl.flock`` on its file. The kernel drops it when the holder exits, however it dies (a
SIGKILLed process leaves no stale lock, only a file that the next taker rewrites). Having taken it, the
holder writes who it is into the file (host, pid, start time, command) and empties the file before letting
go, so a process that finds the lock busy can name the holder. In a job of several processes process 0
takes the lock and decides for all (:func:`edge_jax.distributed.on_lead`); the others never touch the file.
Several hosts sharing one output directory need a file system whose locks reach every host (NFS v4,
Lustre mounted with ``-o flock``); one without locks is refused with :class:`LockError`. In a bucket
(``--out gs://...``) a lock is an object created only where none exists, held under a lease that its holder
renews (:mod:`edge_jax.utils.object_lock`): a killed holder's lock is taken over once its lease runs out.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

from edge_jax import distributed
from edge_jax.errors import UserError
from edge_jax.utils.object_lock import ObjectLock
from edge_jax.utils.object_lock import holder as object_holder
from edge_jax.utils.provenance import command_line
from edge_jax.utils.storage import is_remote

POLL_S = 2.0  # how often a waiter asks a bucket whether a lock is free


class LockError(UserError):
    """A lock file that cannot be locked (a file system without flock): one line naming it and the fix."""


@contextlib.contextmanager
def try_locked(path: str | Path, command: str | None = None) -> Iterator[dict | None]:
    """Take the lock on ``path`` unless another process holds it; yields None when this process (this job)
    holds it now, else what the holder wrote (:func:`holder`, ``{}`` when it has not written yet)."""
    if is_remote(path):
        with _object_locked(str(path), command, wait=False) as busy:
            yield busy
        return
    path, taken = Path(path), []

    def take() -> dict | None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open(path)
        if not _flock(fd, path, wait=False):
            os.close(fd)
            return holder(path)
        _stamp(fd, command)
        taken.append(fd)
        return None

    busy = distributed.on_lead(f"lock {path}", take)
    try:
        yield busy
    finally:
        for fd in taken:
            _release(fd)


@contextlib.contextmanager
def locked(path: str | Path, log: Callable[[str], None] | None = None, what: str = "", command: str | None = None):
    """Hold the lock on ``path`` (an existing directory's file), waiting for its holder first; ``log`` gets one
    line naming the holder when there is a wait. Taken by process 0 of a job; the others follow its decisions."""
    if not distributed.is_lead():
        yield
        return
    if is_remote(path):
        with _object_locked(str(path), command, wait=True, log=log, what=what):
            yield
        return
    path = Path(path)
    fd = _open(path)
    if not _flock(fd, path, wait=False):
        if log:
            log(f"{what or path}: waiting for {who(holder(path))}, who holds {path}")
        _flock(fd, path, wait=True)
    _stamp(fd, command)
    try:
        yield
    finally:
        _release(fd)


@contextlib.contextmanager
def _object_locked(where: str, command: str | None, wait: bool, log: Callable[[str], None] | None = None,
                   what: str = "") -> Iterator[dict | None]:
    """The lock object ``where``, taken by process 0 (the others follow its answer): yields None while this
    job holds it, or (``wait`` unset) the holder's note when another does; ``wait``: poll until it is free."""
    lock, said = ObjectLock(where, _note(command)), False

    def take() -> dict | None:
        nonlocal said
        while True:
            busy = lock.try_take()
            if busy is None or not wait:
                return busy
            if log and not said:
                log(f"{what or where}: waiting for {who(busy)}, who holds {where}")
                said = True
            time.sleep(POLL_S)

    busy = distributed.on_lead(f"lock {where}", take) if not wait else take()
    try:
        yield busy
    finally:
        if busy is None:
            lock.release()  # a no-op on the processes that only followed process 0


def holder(path: str | Path) -> dict:
    """What the holder of the lock on ``path`` wrote: pid, host, since, command ({} when unreadable or empty)."""
    if is_remote(path):
        return object_holder(str(path))
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def who(info: dict) -> str:
    """``pid 1234 on host h since 2026-11-26T01:02:03Z`` for :func:`holder`'s answer ("another process" if empty)."""
    if not info.get("pid"):
        return "another process"
    return f"pid {info['pid']} on host {info.get('host', '?')} since {info.get('since', '?')}"


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)   # not O_TRUNC: the holder's note stays readable


def _flock(fd: int, path: Path, wait: bool) -> bool:
    """Lock ``fd`` exclusively; False when another process holds it and ``wait`` is not set."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        os.close(fd)
        raise LockError(f"cannot lock {path}: {e.strerror or e}; put the output directory on a file system "
                        "with file locks (flock)") from e


def _note(command: str | None) -> dict:
    """Who takes a lock: pid, host, since, command."""
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": since, "command": command or command_line()}


def _stamp(fd: int, command: str | None) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(_note(command)) + "\n").encode(), 0)


def _release(fd: int) -> None:
    with contextlib.suppress(OSError):   # an empty file: no one holds it
        os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
