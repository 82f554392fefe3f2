"""Batches placed on the devices ahead of the step that uses them.

The training loop takes step ``s``'s batch from a :class:`DeviceFeed`, dispatches the step, then
:meth:`DeviceFeed.fill` prepares the next batches (the data iterator, the model's host inputs, the
copy onto the mesh) while the devices run it, so input never sits between two steps::

    feed = DeviceFeed(train_iter, prepare, depth=2)
    for step in ...:
        state, metrics = train_step(state, next(feed))
        feed.fill()                  # batches s+1 .. s+depth on their way to the devices
        ...
        ckpt.save(step, state, feed.data_state())

Every process of a job feeds its own rows (``prepare`` places them with
``jax.make_array_from_process_local_data``, which needs no other process), so a job of several
processes is fed ahead the same way. The data iterator has read ``depth`` batches past the step the
loop is at; each batch carries the iterator's state after it, and :meth:`DeviceFeed.data_state` is the
state after the last batch handed out: a checkpoint of step ``s`` resumes with the batch of step
``s + 1``, however far the feed had read.
"""
from __future__ import annotations

import collections
from typing import Any, Callable

DEPTH = 2  # batches on their way to the devices while a step runs


class DeviceFeed:
    """An iterator of device batches ``prepare(next(data))``, ``depth`` ahead of the consumer.

    ``data`` is a training iterator of :mod:`edge_jax.data` (``local_state()``: this process's cheap
    snapshot; ``global_state(local)``: the checkpointable state, which every process computes
    together)."""

    def __init__(self, data, prepare: Callable[[dict], Any], depth: int = DEPTH):
        if depth < 1:
            raise ValueError(f"depth={depth}: a feed holds at least one batch ahead")
        self.data, self.prepare, self.depth = data, prepare, depth
        self._ready: collections.deque = collections.deque()
        self._state = data.local_state()

    def __iter__(self) -> DeviceFeed:
        return self

    def __next__(self):
        """The next batch (prepared now if :meth:`fill` has not run ahead)."""
        if not self._ready:
            self._pull()
        batch, self._state = self._ready.popleft()
        return batch

    def peek(self):
        """The batch :meth:`__next__` returns next, left in the feed."""
        if not self._ready:
            self._pull()
        return self._ready[0][0]

    def fill(self) -> None:
        """Prepare batches until ``depth`` wait for the steps to come."""
        while len(self._ready) < self.depth:
            self._pull()

    def data_state(self) -> dict:
        """The data iterator's state after the last batch handed out (every process calls it together)."""
        return self.data.global_state(self._state)

    def _pull(self) -> None:
        batch = self.prepare(next(self.data))
        self._ready.append((batch, self.data.local_state()))
