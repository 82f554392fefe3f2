"""What the training loop reads back from the devices, and when; and its step clock.

A step's metrics (loss, gradient norm, learning rate) stay on the devices until the loop needs them:
they are read in one transfer for several steps at once, a log step's once the :data:`READ_LAG` steps
after it have been dispatched (so the devices are busy while the host waits and writes), and before
anything that uses the state (an evaluation, a checkpoint, a preemption stop), so no checkpoint is
ever written from a step whose loss was not finite. Between those points the loop reads nothing:
:func:`steady` marks those stretches with JAX's device-to-host transfer guard, so a read there fails
where the backend guards transfers (GPU, TPU).

:class:`StepClock` measures seconds per step at steady state from the times the reads return: a read
waits for its step to finish, so read to read is the pace of the slower of host and devices (dispatch
to dispatch is not, with the host free to run ahead between reads). Evaluations and checkpoint saves
are left out of the clock.
"""
from __future__ import annotations

import contextlib
import math
import time

import jax

STEADY_GUARD = "disallow"  # jax.transfer_guard_device_to_host level between the loop's reads
# A log step's metrics are read this many dispatches later: the devices have that many steps queued
# while the host waits for the read and writes the record (with one, a record that takes the host
# longer than a step leaves the devices idle).
READ_LAG = 2


def steady():
    """The context of a step between reads: no implicit device-to-host transfer (``float(x)``,
    ``np.asarray(x)``) allowed."""
    return jax.transfer_guard_device_to_host(STEADY_GUARD)


class Readback:
    """Device metrics of the steps dispatched but not read yet, read in one transfer."""

    def __init__(self):
        self._pending: list[tuple[int, dict]] = []

    def add(self, step: int, metrics: dict) -> None:
        self._pending.append((step, metrics))

    def read(self, through: int) -> list[tuple[int, dict]]:
        """``[(step, {name: float})]`` of every pending step up to ``through``, in order (blocks until
        the last of them has finished)."""
        take = [(s, m) for s, m in self._pending if s <= through]
        self._pending = [(s, m) for s, m in self._pending if s > through]
        if not take:
            return []
        values = jax.device_get([m for _, m in take])
        return [(s, {k: float(v) for k, v in m.items()}) for (s, _), m in zip(take, values)]


def finite(metrics: dict) -> bool:
    """Whether a step's loss and gradient norm are finite (training may go on from it)."""
    return math.isfinite(metrics["loss"]) and math.isfinite(metrics["grad_norm"])


class StepClock:
    """Seconds per step at steady state, read to read, with the :meth:`paused` stretches left out.

    The loop dispatches without waiting, so between two reads the host may run several steps ahead of
    the devices and the time between two dispatches says little; a read waits until its step has
    finished (or finds it finished, when the host is the slower side), so the time between the reads
    of two steps over the steps between them is the pace of the slower of host and devices. A log
    record's ``step_time_s`` is that mean since the previous record; :meth:`steady`, the run's, leaves
    out the first :data:`WARMUP` steps (one-time costs: the first execution, the input pipeline's
    threads starting)."""

    WARMUP = 2

    def __init__(self):
        self._paused = 0.0
        self._first: int | None = None                 # the run's first step
        self._steady: tuple[int, float] | None = None  # the first step read after the warm-up, when
        self._last: tuple[int, float] | None = None
        self._window: tuple[int, float] | None = None  # where the current log window starts
        self._opened: tuple[int, float] | None = None  # (the step before the first, its first dispatch)
        self._mean: float | None = None                # the last window's

    def _now(self) -> float:
        return time.perf_counter() - self._paused

    def dispatched(self, step: int) -> None:
        if self._first is None:
            self._first = step
            self._window = self._opened = (step - 1, self._now())  # the first window opens at the first dispatch

    @contextlib.contextmanager
    def paused(self):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - t0

    def read(self, step: int) -> None:
        """Every step through ``step`` has finished: a read just returned them."""
        now = self._now()
        self._last = (step, now)
        if self._steady is None and self._first is not None and step - self._first >= self.WARMUP:
            self._steady = (step, now)

    def window(self) -> float | None:
        """Mean seconds per step from the previous window's end to the last read, which ends this
        window (a log record's); a second record from the same read gets the same mean; None before
        any read."""
        if self._window is None or self._last is None:
            return None
        (start, t0), (end, t) = self._window, self._last
        if end > start:
            self._window, self._mean = self._last, (t - t0) / (end - start)
        return self._mean

    def steady(self) -> float | None:
        """Mean seconds per step over the run, read to read, after the warm-up (from the first dispatch
        where the run is too short for one); None with no step read."""
        if self._last is None:
            return None
        start = self._steady if self._steady is not None and self._last[0] > self._steady[0] else self._opened
        return (self._last[1] - start[1]) / (self._last[0] - start[0]) if self._last[0] > start[0] else None
