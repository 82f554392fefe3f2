"""Streaming training batches straight from the files: memory and start-up that do not grow with the corpus.

Row ``r`` of every global batch (``0 <= r < data.batch_size``) is one stream of its own. The split is
cut into pieces (:mod:`edge_jax.data.pieces`; at least ``4 x batch_size`` where files allow), the
pieces are put in a new seeded order every epoch, and the endless sequence of pieces, epoch after
epoch, is dealt to the rows: row ``r`` reads the pieces at places ``r, r + B, r + 2B, ...``. A row
tokenises its documents (each followed by eos), packs them into windows of ``seq_len + 1`` tokens
with stride ``seq_len`` (as the prepared pipeline does), and shuffles ``data.shuffle_windows``
windows at a time. What row ``r`` yields depends only on the data, the tokenizer, the seed,
``batch_size``, ``seq_len`` and ``shuffle_windows``: never on how many processes or grain workers
read it. A process streams only the rows it holds; grain worker processes (``data.workers``) each
take every W-th of those rows (W divides the process's row count), and grain interleaves them back
in row order.

A row's state is five integers: the piece it is on (its count k), the position in that piece of the
document the current shuffle chunk starts in, the tokens of that document already used, the chunk
count and the windows of the chunk already given out. Every window carries the state after it, so
the iterator knows the state of exactly what it has handed out; a restored row re-reads at most one
chunk. :meth:`StreamIterator.get_state` gathers every process's rows, so process 0 saves the state
of the whole batch and a run may resume on another number of processes.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Iterator

import grain
import numpy as np

from edge_jax import distributed
from edge_jax.data.errors import DataError
from edge_jax.data.pieces import Piece
from edge_jax.data.shards import doc_tokens
from edge_jax.data.tokenizers import tokenizer_dtype

PIECES_PER_ROW = 4
STEPS = 8              # batches a worker makes at a time (one inter-process message per block of rows)
_PREFETCH_BLOCKS = 2


@dataclasses.dataclass(frozen=True)
class Plan:
    """What every row stream is made of (picklable, sent to the grain workers)."""

    pieces: tuple[Piece, ...]
    rows: int           # rows of the global batch
    seq_len: int
    chunk: int          # windows shuffled together
    seed: int
    tok: object

    def piece(self, row: int, k: int) -> Piece:
        epoch, i = divmod(row + k * self.rows, len(self.pieces))
        return self.pieces[_order(self.seed, epoch, len(self.pieces))[i]]


@functools.lru_cache(maxsize=4)
def _order(seed: int, epoch: int, n: int) -> np.ndarray:
    return np.random.default_rng((seed, 0, epoch)).permutation(n)


START = (0, -1, 0, 0, 0)  # piece 0, from its start, no tokens used, chunk 0, nothing given out


def _documents(plan: Plan, row: int, k: int, position: int, skip: int) -> Iterator[list]:
    """``[tokens, k, position, offset]`` of row ``row``'s documents from a cursor: a document's tokens
    (with its eos) from ``offset`` on, the piece count and the position it starts at (-1: a piece's start)."""
    dtype = tokenizer_dtype(plan.tok)
    empty = 0
    while True:
        starts: collections.deque = collections.deque()

        def texts(piece=plan.piece(row, k), at=position):
            for text, after in piece.read(None if at < 0 else at):
                starts.append(at)
                at = after
                yield text
        for ids in doc_tokens(texts(), plan.tok, dtype):
            empty = 0
            yield [ids[skip:], k, starts.popleft(), skip]
            skip = 0
        empty += 1
        if empty > len(plan.pieces):
            raise DataError(f"the stream's {len(plan.pieces)} pieces hold no documents; use a dataset with text")
        k, position = k + 1, -1


def row_windows(plan: Plan, row: int, state=START) -> Iterator[tuple[np.ndarray, tuple]]:
    """``(window int32[seq_len + 1], state after it)`` of one row, forever, from ``state``."""
    k, position, skip, chunk, given = state
    T, K = plan.seq_len, plan.chunk
    docs = _documents(plan, row, k, position, skip)
    segments: collections.deque = collections.deque()   # [tokens, k, position, offset]
    have, cursor = 0, (k, position, skip)
    while True:
        while have < K * T + 1:
            seg = next(docs)
            segments.append(seg)
            have += len(seg[0])
        flat = np.concatenate([s[0] for s in segments])[:K * T + 1].astype(np.int32)
        at = 0
        while at + len(segments[0][0]) <= K * T:
            at += len(segments.popleft()[0])
        head = segments[0]
        head[0], head[3] = head[0][K * T - at:], head[3] + K * T - at
        have -= K * T
        after = (head[1], head[2], head[3])
        windows = np.lib.stride_tricks.sliding_window_view(flat, T + 1)[::T]
        order = np.random.default_rng((plan.seed, 1, row, chunk)).permutation(K)
        for j in range(given, K):
            state = (*cursor, chunk, j + 1) if j + 1 < K else (*after, chunk + 1, 0)
            yield np.array(windows[order[j]]), state
        cursor, chunk, given = after, chunk + 1, 0


def _reference_row_windows(plan: Plan, row: int, count: int) -> list[np.ndarray]:
    """The first ``count`` windows of a row, the plain way: every token of its pieces in order, cut
    into windows, each chunk of them permuted (the reference :func:`row_windows` is tested against)."""
    T, K = plan.seq_len, plan.chunk
    need = -(-count // K) * K * T + 1
    tokens, k = [], 0
    while sum(map(len, tokens)) < need:
        texts = list(plan.piece(row, k).texts())
        tokens += [np.append(np.asarray(plan.tok.encode(t), np.int32), plan.tok.eos_id) for t in texts]
        k += 1
    flat = np.concatenate(tokens)
    out = []
    for c in range(-(-count // K)):
        order = np.random.default_rng((plan.seed, 1, row, c)).permutation(K)
        out += [flat[(c * K + i) * T:(c * K + i) * T + T + 1] for i in order]
    return out[:count]


class Rows(grain.IterDataset):
    """Blocks of ``STEPS`` consecutive windows of each of some rows (int32[STEPS, rows, seq_len + 1]) with
    the rows' states after each; grain's worker processes each take a slice of the rows (set_slice)."""

    def __init__(self, plan: Plan, rows: tuple[int, ...], states: dict):
        super().__init__()
        self._plan, self._rows, self._states = plan, tuple(rows), dict(states)
        self._shared = False

    def enable_shared_memory_output(self) -> None:
        """In a grain worker: write the windows straight into shared memory (no copy to send them)."""
        self._shared = True

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        self._rows = self._rows[sl]

    def __iter__(self):
        return RowsIterator(self._plan, self._rows, self._states, self._shared)


class RowsIterator(grain.DatasetIterator):
    def __init__(self, plan: Plan, rows: tuple[int, ...], states: dict, shared: bool = False):
        super().__init__()
        self._plan, self._rows, self._shared = plan, rows, shared
        self._states = {r: tuple(states.get(r, START)) for r in rows}
        self._streams = None

    def __next__(self) -> dict:
        if self._streams is None:
            self._streams = {r: row_windows(self._plan, r, self._states[r]) for r in self._rows}
        shape = (STEPS, len(self._rows), self._plan.seq_len + 1)
        shared = grain.multiprocessing.SharedMemoryArray
        windows = shared(shape, np.int32) if self._shared else np.empty(shape, np.int32)
        states = np.empty((STEPS, len(self._rows), 1 + len(START)), np.int64)
        for step in range(STEPS):
            for i, row in enumerate(self._rows):
                windows[step, i], self._states[row] = next(self._streams[row])
                states[step, i] = (row, *self._states[row])
        return {"window": windows, "state": states}

    def get_state(self) -> dict:
        return {"rows": {str(r): list(s) for r, s in self._states.items()}}

    def set_state(self, state: dict) -> None:
        self._states = {int(r): tuple(s) for r, s in state["rows"].items()}
        self._streams = None


def to_io(windows: np.ndarray) -> dict:
    """Windows int32[B, T+1] as the model's {'inputs', 'targets'}: int32[B, T]."""
    return {"inputs": windows[:, :-1], "targets": windows[:, 1:]}


def usable_workers(workers: int, rows: int) -> int:
    """The most grain workers, at most ``workers``, that divide ``rows`` (so row order survives interleaving)."""
    return max((w for w in range(1, min(workers, rows) + 1) if rows % w == 0), default=0) if workers > 0 else 0


class StreamIterator:
    """Endless iterator of this process's rows ``rows`` of every global batch, ``{'inputs', 'targets'}``:
    int32[len(rows), seq_len]. ``get_state()`` (every process calls it together) is the state of every
    row of the global batch; ``set_state`` restores this process's rows from it."""

    def __init__(self, plan: Plan, rows: range, workers: int):
        self.plan, self.rows, self.workers = plan, rows, usable_workers(workers, len(rows))
        self._states = {r: START for r in rows}
        self._it = None

    def _start(self):
        ds = Rows(self.plan, tuple(self.rows), self._states)
        if self.workers:
            from absl import flags
            if not flags.FLAGS.is_parsed():   # grain's worker processes read absl flags; we have none
                flags.FLAGS.mark_as_parsed()
            ds = ds.mp_prefetch(grain.multiprocessing.MultiprocessingOptions(
                num_workers=self.workers, per_worker_buffer_size=_PREFETCH_BLOCKS))
        else:
            ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=_PREFETCH_BLOCKS)
        self._it, self._steps = iter(ds), collections.deque()

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self._it is None:
            self._start()
        if not self._steps:   # one block from each worker in turn: worker w holds rows w, w + W, ...
            blocks = [next(self._it) for _ in range(max(1, self.workers))]
            windows = np.stack([b["window"] for b in blocks], axis=2).reshape(STEPS, len(self.rows), -1)
            states = np.stack([b["state"] for b in blocks], axis=2).reshape(STEPS, len(self.rows), -1)
            self._steps.extend(zip(windows, states))
        windows, states = self._steps.popleft()
        for row, *state in states.tolist():
            self._states[row] = tuple(state)
        return to_io(windows)

    def get_state(self) -> dict:
        return self.global_state(self.local_state())

    def local_state(self) -> dict:
        """This process's rows' positions now (a copy; no other process takes part)."""
        return dict(self._states)

    def global_state(self, local: dict) -> dict:
        """The checkpointable state of the global batch from each process's :meth:`local_state`
        (every process calls it together)."""
        rows = {}
        for part in distributed.gather("stream rows", {str(r): list(s) for r, s in local.items()}):
            rows.update(part)
        return {"stream_rows": rows}

    def set_state(self, state: dict) -> None:
        saved = state.get("stream_rows")
        if saved is None or any(str(r) not in saved for r in self.rows):
            raise DataError("the checkpoint's data state is not a stream's over these rows (data.stream or "
                            "data.batch_size changed); resume with the settings it was trained with")
        self.close()
        self._states = {r: tuple(saved[str(r)]) for r in self.rows}

    def close(self) -> None:
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()
        self._it = None
