"""Thin orbax wrapper: the train state and the data-iterator state saved together, atomically and verified.

orbax writes each step to a temporary directory and renames it when complete, so a run killed
mid-save leaves the previous checkpoints intact and the partial one is ignored on restart. Saves are
asynchronous: :meth:`Checkpointer.save` returns once the arrays are copied off the devices, and the
files are written and committed in orbax's background thread while training goes on. Just before the
rename every file of the step is hashed into its ``checksums.json`` (:mod:`edge_jax.train.checksums`).

A step that was written but can no longer be read, or whose bytes no longer match their checksums (a
disk fault, a file overwritten or truncated by hand), is passed over on resume:
:meth:`Checkpointer.restore_newest` tries the steps newest first, resumes from the newest that is
intact and reads, and moves the bad newer ones to ``<directory>.corrupt/<step>`` (kept for inspection,
out of orbax's way, so the run can save those steps again). In a job of several processes they verify
a share of the files each and agree on every step, so all of them resume from the same one.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import os
from typing import Callable, TypeVar

import jax
import numpy as np
import orbax.checkpoint as ocp

from edge_jax import distributed
from edge_jax.errors import UserError
from edge_jax.train import checksums
from edge_jax.utils.storage import epath, explain, is_remote, move

T = TypeVar("T")


class CheckpointError(UserError, RuntimeError):
    """No checkpoint of a workdir can be read (one-line message naming the directory)."""


# errno of a full disk (ENOSPC) and of a full quota (EDQUOT); tensorstore (orbax's array writer) reports them
# in its status text as os_error_code='28'
FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(e: BaseException) -> bool:
    """Whether ``e``, or an exception it wraps (``__cause__``, ``__context__``, an exception group's), is a full
    disk or quota: an OSError with that errno, or tensorstore's error text naming it."""
    seen, todo = set(), [e]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in FULL:
            return True
        if any(f"os_error_code='{code}'" in str(e) for code in FULL):
            return True
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return False


class _QuietDiskFull(logging.Filter):
    """Drops orbax's log records of a failed background save on a full disk (a traceback for each of its
    threads): :class:`CheckpointError` says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not ((exc is not None and disk_full(exc)) or any(f"os_error_code='{c}'" in record.getMessage()
                                                                 for c in FULL))


class Checkpointer:
    """Keeps the newest ``keep`` steps of a run that saves every ``every`` steps. ``verified`` (checksums
    written and checked) and ``background`` (asynchronous saves) are on for every run; ``edge-jax bench
    checkpoint`` turns them off to measure what they cost."""

    def __init__(self, directory: str, keep: int, every: int, verified: bool = True, background: bool = True):
        self.directory = directory if is_remote(directory) else os.path.abspath(directory)
        self.verified = verified
        commit = checksums.commit_class(directory) if verified else None
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=max(every, 1),
                                               create=True, cleanup_tmp_directories=True,
                                               enable_async_checkpointing=background, temporary_path_class=commit)
        self._mgr = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data", "health"))
        self._failed: BaseException | None = None  # the error a save met (full disk, a bucket refusing; said once)
        if not any(isinstance(f, _QuietDiskFull) for f in logging.getLogger("absl").filters):
            logging.getLogger("absl").addFilter(_QuietDiskFull())

    def latest_step(self) -> int | None:
        return self._mgr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mgr.all_steps())

    def save(self, step: int, state, data_state: dict, force: bool = False, metrics: dict | None = None) -> bool:
        """Start saving ``step`` (``metrics``: numbers kept beside it, see :meth:`metrics`); returns once the
        arrays are copied off the devices, and the files are written in the background (:meth:`wait`). A full
        disk, found here (the previous save's) or by :meth:`wait`, is a one-line :class:`CheckpointError`."""
        items = {"state": ocp.args.StandardSave(state), "data": ocp.args.JsonSave(data_state)}
        if metrics is not None:
            items["health"] = ocp.args.JsonSave(metrics)
        with self._no_space():
            return self._mgr.save(step, args=ocp.args.Composite(**items), force=force)

    @contextlib.contextmanager
    def _no_space(self):
        """A full disk or quota during a save: the step being written is dropped (orbax leaves it under a
        temporary name, removed on restart; one already under its final name that does not verify is moved
        aside) and :class:`CheckpointError` names the directory and the last intact step."""
        if self._failed is not None:  # already said; what follows (close) is the same failure
            with contextlib.suppress(Exception):
                yield
            return
        try:
            yield
        except Exception as e:
            refused = explain(e, self.directory) if is_remote(self.directory) else None
            if refused is not None:  # the bucket refused or could not be reached: the step is not committed
                self._failed = e
                raise CheckpointError(f"saving a checkpoint failed: {refused}") from None
            if not disk_full(e):
                raise
            self._failed = e
            raise CheckpointError(f"no space left on device saving a checkpoint in {self.directory}; "
                                  f"{self._last_intact()}: free space and rerun the same command to resume") from None

    def _last_intact(self) -> str:
        self._mgr.reload()
        for step in sorted(self.all_steps(), reverse=True):
            if checksums.verify(os.path.join(self.directory, str(step))) is None:
                return f"its last intact step is {step}, kept"
            if distributed.is_lead():
                self._move_aside(step)  # a partly written step must not look like a saved one
        return "no step was saved before"

    def metrics(self, step: int) -> dict:
        """The ``metrics`` saved with ``step`` ({} for none, or for a step that cannot be read)."""
        try:
            return dict(self._mgr.restore(step, args=ocp.args.Composite(health=ocp.args.JsonRestore()))["health"])
        except Exception:  # noqa: BLE001 - a step saved without them, or damaged, has no usable metrics
            return {}

    def restore(self, step: int, abstract_state):
        """``abstract_state``: a tree of ``jax.ShapeDtypeStruct`` carrying the target shardings."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore())
        out = self._mgr.restore(step, args=args)
        return out["state"], out["data"]

    def restore_params(self, step: int, abstract_params):
        """Only the ``params`` of the saved train state (``abstract_params`` as in :meth:`restore`), so
        the optimizer the source trained with need not match this one."""
        item = {"params": abstract_params}
        args = ocp.args.PyTreeRestore(item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
                                      partial_restore=True)
        # its own checkpointer: the manager serves each item with one handler, the full restore's and save's
        with ocp.PyTreeCheckpointer() as checkpointer:
            return checkpointer.restore(os.path.join(self.directory, str(step), "state"), args=args)["params"]

    def saved_groups(self, step: int) -> set[str]:
        """The optimizer-group labels the step's train state was saved with (read from its metadata)."""
        with ocp.PyTreeCheckpointer() as checkpointer:
            tree = checkpointer.metadata(os.path.join(self.directory, str(step), "state")).item_metadata
        names = set()
        for path, _ in jax.tree_util.tree_flatten_with_path(getattr(tree, "tree", tree))[0]:
            keys = [getattr(k, "key", None) for k in path]
            names.update(keys[i + 1] for i, k in enumerate(keys[:-1]) if k == "inner_states")
        return names

    def restore_newest(self, restore: Callable[[int], T], warn: Callable[[str], None] = print,
                       move: bool = True) -> tuple[int, T] | None:
        """``(step, restore(step))`` for the newest step that ``restore`` reads, None with no checkpoint.

        A step whose files do not match their checksums, or whose restore raises anything but a
        :class:`UserError` (a wrong config is the user's to fix, not a damaged file), is damaged: one
        warning line names it, and once an older step has been read the damaged newer ones are moved
        aside (``move``: the lead process). A step saved without checksums loads with one note. With no
        intact step at all nothing is moved and :class:`CheckpointError` says which directory to delete
        to start over."""
        ok = (None, checksums.UNVERIFIED)
        bad: list[tuple[int, str]] = []
        for step in sorted(self.all_steps(), reverse=True):
            why = self.check(step)
            value = None
            if why in ok:
                try:
                    value = restore(step)
                except UserError:
                    raise
                except Exception as e:  # noqa: BLE001 - any failure to read a step means the step is damaged
                    lines = str(e).strip().splitlines()
                    why = f"{type(e).__name__}: {lines[0][:200] if lines else '(no message)'}"
            # every process resumes from the same step: one that failed anywhere is bad everywhere
            failed = [w for w in distributed.gather(f"restore {self.directory} {step}", why) if w not in ok]
            if failed:
                bad.append((step, failed[0]))
                continue
            if why == checksums.UNVERIFIED:
                warn(f"note: checkpoint step {step} in {self.directory} has no checksums (written by an older "
                     "edge_jax); loaded unverified")
            for bad_step, reason in bad:
                where = self._move_aside(bad_step) if move else os.path.join(self.directory, str(bad_step))
                warn(f"warning: checkpoint step {bad_step} in {self.directory} is damaged ({reason}); "
                     f"using step {step}{f', the bad step kept in {where}' if move else ''}")
            return step, value
        if bad:
            steps = ", ".join(f"step {s}: {why}" for s, why in bad)
            raise CheckpointError(f"no intact checkpoint in {self.directory} ({steps}); delete that directory "
                                  "to start the run over")
        return None

    def check(self, step: int) -> str | None:
        """Why the step's files do not match their checksums (or its train state is another step's: a step
        directory renamed), :data:`checksums.UNVERIFIED` for a step saved without them, None when intact;
        each process of a job hashes its share of the files."""
        why = checksums.UNVERIFIED
        if self.verified:
            found = distributed.gather(f"verify {self.directory} {step}",
                                       checksums.verify(os.path.join(self.directory, str(step)), distributed.share()))
            why = next((w for w in found if w not in (None, checksums.UNVERIFIED)), found[0])
            if why not in (None, checksums.UNVERIFIED):
                return why
        saved = self.saved_step(step)
        if saved is not None and saved != step:
            return f"its train state is step {saved}'s (a renamed step directory?)"
        return why

    def saved_step(self, step: int) -> int | None:
        """The ``step`` counter inside the train state saved as ``step`` (one scalar read, before the costly
        restore), None for a state saved without one (params only: an HF import) or that cannot be read
        (the restore that follows names that damage)."""
        item = {"step": 0}
        args = ocp.args.PyTreeRestore(item=item, restore_args={"step": ocp.RestoreArgs(restore_type=np.ndarray)},
                                      partial_restore=True)
        try:
            with ocp.PyTreeCheckpointer() as checkpointer:
                found = checkpointer.restore(os.path.join(self.directory, str(step), "state"), args=args)["step"]
        except Exception:  # noqa: BLE001 - unreadable: the full restore fails next and says why
            return None
        # a partial restore hands back the item's own value (the int 0) for a key the state does not hold
        return int(found) if isinstance(found, np.ndarray) and found.shape == () else None

    def _move_aside(self, step: int) -> str:
        """Move the step's directory to ``<directory>.corrupt/<step>[.k]`` and make orbax forget it."""
        target = os.path.join(self.directory + ".corrupt", str(step))
        k = 0
        while epath(target if not k else f"{target}.{k}").exists():
            k += 1
        target = target if not k else f"{target}.{k}"
        move(os.path.join(self.directory, str(step)), target)
        self._mgr.reload()
        return target

    def wait(self) -> None:
        with self._no_space():
            self._mgr.wait_until_finished()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            with contextlib.suppress(Exception) if self._failed is not None else contextlib.nullcontext():
                self._mgr.close()
