"""Stop at a step every process agrees on when the job is told to go (SIGTERM), so no work is lost.

Cloud TPU maintenance, spot preemption and Slurm time limits send SIGTERM some seconds before they
kill. In a job of several processes JAX's distributed runtime catches it (its preemption service) and
agrees on a step that every process still reaches (:func:`jax.experimental.multihost_utils.
reached_preemption_sync_point`); a single process catches it itself and stops after the step in
progress. The training loop saves a checkpoint at that step and raises :class:`edge_jax.errors.Preempted`.

    with PreemptionWatch() as watch:
        for step in ...:
            ...
            if watch.reached(step):
                save, then raise Preempted
"""
from __future__ import annotations

import signal
import threading

from edge_jax import distributed


class PreemptionWatch:
    """Whether the job was told to stop; a context manager that catches SIGTERM while it is open (one
    process, main thread; a job of several processes leaves the signal to JAX's preemption service)."""

    def __init__(self):
        self.signalled = False
        self._previous = None
        self._shared = distributed.process_count() > 1

    def __enter__(self) -> PreemptionWatch:
        if not self._shared and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True

    def reached(self, step: int) -> bool:
        """True at the step where this process (every process of a job) stops; call it at every step."""
        if self._shared:
            from jax.experimental import multihost_utils
            return multihost_utils.reached_preemption_sync_point(step)
        return self.signalled
