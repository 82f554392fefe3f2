"""A file that only grows (metrics lines, TensorBoard events), on a disk or in a bucket."""
from __future__ import annotations

import time

from edge_jax.utils.atomic import write_bytes_atomic
from edge_jax.utils.storage import is_remote, published


class AppendLog:
    """A file that only grows (metrics lines, TensorBoard events). A local one is appended to in place and
    each :meth:`append` is on disk when it returns. An object in a bucket cannot be appended to: the log is
    kept in memory and the whole object is published again (:func:`published`, so readers see a whole
    prefix of the log) by :meth:`flush`, by an append ``every_s`` seconds after the last publish, and by
    :meth:`close`. ``start``: the log's first bytes; the file or object is replaced by them now."""

    def __init__(self, where: str, start: bytes = b"", every_s: float = 30.0):
        self.where, self.every_s = str(where), every_s
        self.remote = is_remote(self.where)
        self._data, self._dirty = bytearray(start), True
        self._published = 0.0
        if self.remote:
            self.flush()
        else:
            write_bytes_atomic(self.where, bytes(start))
            self._file = open(self.where, "ab")

    def append(self, data: bytes) -> None:
        if not self.remote:
            self._file.write(data)
            self._file.flush()
            return
        self._data += data
        self._dirty = True
        if time.monotonic() - self._published >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Make everything appended so far readable (a bucket's object published again when it changed)."""
        if self.remote and self._dirty:
            with published(self.where, "wb") as f:
                f.write(bytes(self._data))
            self._dirty, self._published = False, time.monotonic()

    def close(self) -> None:
        if self.remote:
            self.flush()
        else:
            self._file.close()
