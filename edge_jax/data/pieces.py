"""Pieces: the units a split is read, prepared and streamed in.

A :class:`Piece` is a run of documents of one file or record source that a reader can start from any
document it reached, given the position it reported for that document (:meth:`Piece.read` yields
``(text, position after it)``). A split is an ordered list of pieces whose documents, read in order,
are the split's documents in order, however finely it was cut; the cut only decides how the work is
shared (between processes preparing shards, or between the rows of a stream).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator


@dataclasses.dataclass(frozen=True)
class Piece:
    reader: Any     # FileReader | RecordReader: picklable, opens its files lazily
    unit: int       # the file (or 0 for a record source)
    start: int      # first position
    stop: int       # end position (exclusive); -1: to the end of the unit

    def read(self, position: int | None = None) -> Iterator[tuple[str, int]]:
        """``(text, position after it)`` of the piece's documents from ``position`` (default: its start)."""
        return self.reader.read(self, self.start if position is None else position)

    def texts(self) -> Iterator[str]:
        """The piece's documents from its start."""
        return (text for text, _ in self.read())


def split_counts(sizes: list[int], want: int) -> list[int]:
    """How many pieces to cut each of the files of ``sizes`` bytes into so that there are about
    ``want`` in all: one each when there are that many files already, else in proportion to size."""
    if len(sizes) >= want or not sizes:
        return [1] * len(sizes)
    total = max(1, sum(sizes))
    return [max(1, -(-want * s // total)) for s in sizes]


def record_cuts(count: int, want: int) -> list[tuple[int, int]]:
    """``want`` (at most ``count``) near-equal runs of the records ``0 .. count - 1``."""
    n = max(1, min(want, count))
    edges = [count * j // n for j in range(n + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]
