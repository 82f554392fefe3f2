"""Stop at a step every process agrees on when the job is told to go (SIGTERM, or Ctrl-C), so no work is lost.

Cloud TPU maintenance, spot preemption and Slurm time limits send SIGTERM some seconds before they
kill. In a job of several processes JAX's distributed runtime catches it (its preemption service) and
agrees on a step that every process still reaches (:func:`jax.experimental.multihost_utils.
reached_preemption_sync_point`); a single process catches it itself and stops after the step in
progress. The training loop saves a checkpoint at that step and raises :class:`edge_jax.errors.Preempted`.
A first Ctrl-C (SIGINT) of a single process stops the same way and raises :class:`edge_jax.errors.Interrupted`
(exit 130); a second one interrupts at once.

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
    """Whether the job was told to stop; a context manager that catches SIGTERM and a first Ctrl-C (SIGINT)
    while it is open (one process, main thread; a job of several processes leaves SIGTERM to JAX's preemption
    service, and Ctrl-C to KeyboardInterrupt). After a first Ctrl-C the previous SIGINT handler is back, so a
    second one interrupts at once (KeyboardInterrupt)."""

    def __init__(self):
        self.signalled = False
        self.interrupted = False  # the stop was asked for by Ctrl-C (SIGINT), not SIGTERM
        self._previous: dict[int, object] = {}
        self._shared = distributed.process_count() > 1

    def __enter__(self) -> PreemptionWatch:
        if not self._shared and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(signum) is not signal.SIG_IGN:  # e.g. a background job's SIGINT stays ignored
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        self.signalled = True
        if signum == signal.SIGINT:
            self.interrupted = True
            signal.signal(signal.SIGINT, self._previous.pop(signal.SIGINT))  # a second Ctrl-C: at once

    def reached(self, step: int) -> bool:
        """True at the step where this process (every process of a job) stops; call it at every step."""
        if self._shared:
            from jax.experimental import multihost_utils
            return multihost_utils.reached_preemption_sync_point(step)
        return self.signalled
