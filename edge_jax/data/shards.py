"""Prepared token shards: a split tokenised once into the flat stream of its documents, each followed
by eos, stored as one raw token file per piece (:mod:`edge_jax.data.pieces`) and read with random access.

    <tokens dir>/<source key>-<split>-<tokenizer name>/
        00000.bin 00001.bin ...   little-endian tokens of piece i (uint16, or int32 for vocabularies > 65536)
        manifest.json             {"dtype", "shards": [{"file", "tokens"}...]}, written last

The tokens dir is ``data.tokens_dir``, else ``<data.data_dir>/tokens``; it may be remote (``gs://``,
through etils.epath) and shared by every host. Each process of a job prepares every N-th piece
(N processes), writing a shard under a temporary name and moving it into place, so a killed
preparation resumes where it stopped; when every shard exists, process 0 writes the manifest. Two
jobs that prepare one split at once (two grid streams on a host) both finish: the later one
replaces the same bytes. A host that does not see the others' shards (a host-local directory)
prepares the rest itself. A mixture's train split is its parts' shards one after another (each
part prepared once, whatever mixture it is in).

Token ids are checked against the tokenizer's vocabulary twice, each time with one vectorized max: a
document's ids before they are written (and cast to the shard's dtype, which would wrap them), and what
is read from the shards (each training batch, an evaluation split; :meth:`TokenShards.check`), so a
shard overwritten or prepared with another tokenizer is found. An id outside it, a missing shard and a
shard shorter than the manifest are each a one-line DataError naming the shard and the command that
rebuilds it (:func:`rebuild`).
"""
from __future__ import annotations

import itertools
import json
import os
from typing import Callable, Iterator

import numpy as np

from edge_jax import distributed
from edge_jax.data.errors import DataError
from edge_jax.data.sources import Source
from edge_jax.data.tokenizers import tokenizer_dtype
from edge_jax.utils.atomic import atomic_open, write_text_atomic
from edge_jax.utils.storage import epath, remote_fs

PREPARE_PIECES = 64       # a split is prepared in at least this many pieces (one per file when more)
ENCODE_CHARS = 1 << 19    # characters tokenised at a time


def shards_dir(tokens_dir: str, source: Source, split: str, tok) -> str:
    return os.path.join(tokens_dir, f"{source.key}-{split}-{tok.name}")


def is_prepared(root: str) -> bool:
    """Whether the shards at ``root`` are complete (their manifest is written last)."""
    return (epath(root) / "manifest.json").exists()


def rebuild(root, shards=None) -> str:
    """How to prepare the prepared split at ``root`` again: its manifest and ``shards`` deleted (``data
    prepare`` prepares only the shards that are missing once the manifest is gone), or (``shards`` None)
    the whole directory."""
    gone = str(root) if shards is None else " and ".join([*map(str, shards), f"{root}/manifest.json"])
    return f"delete {gone}, then run `edge-jax data prepare` with this run's --config flags to prepare it again"


def outside(ids: np.ndarray, vocab: int) -> int | None:
    """The index of the first id of ``ids`` outside ``0 .. vocab - 1``, or None (one vectorized max;
    a negative id of a signed dtype counts as outside)."""
    if not len(ids):
        return None
    unsigned = ids.view(ids.dtype.str.replace("i", "u")) if ids.dtype.kind == "i" else ids
    if int(unsigned.max()) < vocab:
        return None
    return int(np.argmax(unsigned >= vocab))


def doc_tokens(texts, tok, dtype) -> Iterator[np.ndarray]:
    """Each text's tokens followed by eos, as ``dtype``; the texts are encoded a block at a time. An id
    outside the tokenizer's vocabulary (which ``dtype`` may not hold) is a one-line DataError."""
    vocab = int(tok.vocab_size)
    if not 0 <= tok.eos_id < vocab:
        raise DataError(f"tokenizer {tok.name}'s eos id {tok.eos_id} is outside its vocabulary of {vocab} ids; "
                        "use another tokenizer")
    eos = np.array([tok.eos_id], dtype=dtype)
    block, size = [], 0
    for text in itertools.chain(texts, [None]):
        if text is not None:
            block.append(text)
            size += len(text)
        if block and (size >= ENCODE_CHARS or text is None):
            for doc, ids in zip(block, tok.encode_many(block)):
                ids = np.asarray(ids)
                bad = outside(ids, vocab)
                if bad is not None:
                    raise DataError(f"tokenizer {tok.name} gave id {ids[bad]}, outside its vocabulary of {vocab} "
                                    f"ids, for the document beginning {doc[:40]!r}; use another tokenizer "
                                    "(data.tokenizer)")
                yield np.concatenate([ids.astype(dtype, copy=False), eos])
            block, size = [], 0


def _write_piece(piece, tok, dtype, out) -> None:
    """One shard, written by this process whichever it is: a bad record or a kill leaves no half-written
    shard behind (a temporary file renamed into place, or one object committed at the end in a bucket);
    another job on this host may have written the same bytes first."""
    with distributed.solo(), atomic_open(str(out), "wb") as f:
        for ids in doc_tokens(piece.texts(), tok, dtype):
            f.write(ids.astype(dtype.newbyteorder("<"), copy=False).tobytes())


def prepare(source: Source, split: str, tok, tokens_dir: str,
            progress: Callable[[int, int], None] | None = None) -> str:
    """Prepare ``split`` of the leaf source ``source`` under ``tokens_dir`` (see the module docstring);
    return its directory. Every process of a job must call it (they share the work)."""
    root = epath(shards_dir(tokens_dir, source, split, tok))
    if is_prepared(str(root)):
        return str(root)
    root.mkdir(parents=True, exist_ok=True)
    pieces = source.pieces(split, PREPARE_PIECES)
    dtype = tokenizer_dtype(tok)
    files = [root / f"{i:05d}.bin" for i in range(len(pieces))]
    me, count = distributed.process_index(), distributed.process_count()

    def work(todo: list[int]) -> None:
        for done, i in enumerate(todo, 1):
            if not files[i].exists():
                _write_piece(pieces[i], tok, dtype, files[i])
            if progress:
                progress(done, len(todo))

    work(list(range(me, len(pieces), count)))
    distributed.barrier(f"shards {root.name}")
    work([i for i in range(len(pieces)) if not files[i].exists()])  # a host-local directory: the rest too

    def manifest() -> None:
        shards = [{"file": f.name, "tokens": f.stat().length // dtype.itemsize} for f in files]
        if not any(s["tokens"] for s in shards):
            raise DataError(f"dataset '{source.name}' split '{split}' has no documents; "
                            "use another split or dataset")
        write_text_atomic(str(root / "manifest.json"), json.dumps({"dtype": dtype.name, "shards": shards}))

    distributed.on_lead(f"manifest {root.name}", manifest)
    if not (root / "manifest.json").exists():
        with distributed.solo():
            manifest()
    return str(root)


class TokenShards:
    """Random access to prepared shards: ``len(t)`` tokens, ``t[a:b]`` a numpy array (read with ``pread``
    locally, a ranged read remotely; nothing is memory-mapped or held whole). Picklable."""

    def __init__(self, roots: list[str], vocab: int = 0, tokenizer: str = ""):
        """``vocab``: the ids :meth:`check` allows are below it (0: none checked); ``tokenizer`` names it."""
        self.roots, files, counts = list(roots), [], []
        self.vocab, self.tokenizer = int(vocab), tokenizer
        dtypes = set()
        for root in self.roots:
            meta = json.loads((epath(root) / "manifest.json").read_text())
            dtypes.add(meta["dtype"])
            files += [os.path.join(root, s["file"]) for s in meta["shards"]]
            counts += [int(s["tokens"]) for s in meta["shards"]]
        if len(dtypes) != 1:
            raise DataError(f"prepared shards {self.roots} mix token types {sorted(dtypes)}; prepare them "
                            "again with one tokenizer")
        self.dtype = np.dtype(dtypes.pop()).newbyteorder("<")
        self.files = files
        self.ends = np.cumsum(counts, dtype=np.int64)
        self._fds: dict[int, object] = {}
        for path in files:   # local shards are checked now (a stat each); remote ones when read
            if "://" not in path and not os.path.isfile(path):
                raise self._missing(path)

    @staticmethod
    def _missing(path: str) -> DataError:
        return DataError(f"prepared shard {path} is missing; {rebuild(os.path.dirname(path), [])}")

    def __getstate__(self):
        return {**self.__dict__, "_fds": {}}

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, sl: slice) -> np.ndarray:
        start, stop, step = sl.indices(len(self))
        if step != 1:
            raise IndexError("token shards take contiguous slices")
        parts, at = [], start
        while at < stop:
            i = int(np.searchsorted(self.ends, at, side="right"))
            first = int(self.ends[i - 1]) if i else 0
            n = min(stop, int(self.ends[i])) - at
            parts.append(self._read(i, at - first, n))
            at += n
        out = np.concatenate(parts) if parts else np.zeros(0, self.dtype)
        return out.astype(self.dtype.newbyteorder("="))

    def __array__(self, dtype=None, copy=None):
        out = self[0:len(self)]
        return out if dtype is None else out.astype(dtype)

    def windows(self, starts, length: int) -> np.ndarray:
        """``[len(starts), length]`` tokens, row k from token ``starts[k]``, read together: the ranges of
        :meth:`read_plan` (overlapping or touching ones merged), on a disk one ``pread`` each, in a bucket as
        concurrent ranged requests. The batched form of ``np.stack([self[s:s + length] for s in starts])``
        (:meth:`__getitem__`, one range at a time), which the tests hold it to."""
        plan = self.read_plan(starts, length)
        arrays = self._fetch(plan)
        begins = np.array([(int(self.ends[i - 1]) if i else 0) + offset for i, offset, _ in plan], np.int64)
        out = np.empty((len(starts), length), self.dtype)
        for k, start in enumerate(starts):
            r, at, filled = int(np.searchsorted(begins, start, side="right")) - 1, int(start), 0
            while filled < length:  # a window across a shard boundary continues in the next request
                part = arrays[r][at - begins[r]:][:length - filled]
                out[k, filled:filled + len(part)] = part
                filled, at, r = filled + len(part), at + len(part), r + 1
        return out.astype(self.dtype.newbyteorder("="))

    def read_plan(self, starts, length: int) -> list[tuple[int, int, int]]:
        """The reads that fetch ``length`` tokens from each of ``starts``: ``(shard, first token in it, tokens)``
        in shard order, ranges in one shard that overlap or touch merged into one (consecutive training
        windows share a token, so a run of them is one read)."""
        spans = []
        for at in sorted({int(s) for s in starts}):
            stop = at + length
            if at < 0 or stop > len(self):
                raise IndexError(f"tokens {at}:{stop} outside the {len(self)} tokens of {self.roots}")
            while at < stop:
                i = int(np.searchsorted(self.ends, at, side="right"))
                first = int(self.ends[i - 1]) if i else 0
                n = min(stop, int(self.ends[i])) - at
                spans.append((i, at - first, n))
                at += n
        merged: list[tuple[int, int, int]] = []
        for i, offset, n in spans:
            if merged and merged[-1][0] == i and offset <= merged[-1][1] + merged[-1][2]:
                _, first, m = merged[-1]
                merged[-1] = (i, first, max(first + m, offset + n) - first)
            else:
                merged.append((i, offset, n))
        return merged

    def _fetch(self, plan: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """The token arrays of the reads of ``plan``: a disk's one ``pread`` each, a bucket's all at once
        (fsspec's ``cat_ranges``, as concurrent requests; a mixture may have parts in both)."""
        out: list = [None] * len(plan)
        remote = [k for k, (i, _, _) in enumerate(plan) if "://" in self.files[i]]
        for k, (i, offset, n) in enumerate(plan):
            if "://" not in self.files[i]:
                out[k] = self._read(i, offset, n)
        if remote:
            size = self.dtype.itemsize
            paths = [self.files[plan[k][0]] for k in remote]
            fs, _ = remote_fs(paths[0])
            found = fs.cat_ranges(paths, [plan[k][1] * size for k in remote],
                                  [(plan[k][1] + plan[k][2]) * size for k in remote], on_error="return")
            for k, path, data in zip(remote, paths, found):
                out[k] = self._checked(path, data, plan[k][2])
        return out

    def _read(self, i: int, offset: int, n: int) -> np.ndarray:
        """``n`` tokens of shard ``i`` from its token ``offset``: one ``pread``, or one ranged request."""
        size = self.dtype.itemsize
        path = self.files[i]
        try:
            if "://" in path:
                data = remote_fs(path)[0].cat_file(path, start=offset * size, end=(offset + n) * size)
            else:
                if i not in self._fds:
                    self._fds[i] = os.open(path, os.O_RDONLY)
                data = os.pread(self._fds[i], n * size, offset * size)
        except FileNotFoundError as e:
            data = e
        return self._checked(path, data, n)

    def _checked(self, path: str, data, n: int) -> np.ndarray:
        """``data`` (bytes read from ``path``, or the error reading it raised) as ``n`` tokens; a missing or
        short shard is a one-line DataError."""
        if isinstance(data, FileNotFoundError):
            raise self._missing(path) from None
        if isinstance(data, BaseException):
            raise data
        if len(data) != n * self.dtype.itemsize:
            raise DataError(f"prepared shard {path} is shorter than its manifest says; "
                            f"{rebuild(os.path.dirname(path), [path])}")
        return np.frombuffer(data, self.dtype)

    def check(self, ids: np.ndarray, start: int | None = None) -> None:
        """Every id of ``ids`` (read from these shards from token ``start``; None: from where is not known)
        is in the vocabulary (one vectorized max); else a one-line DataError naming the shard that holds
        the first id outside it (found, when ``start`` is None, by reading the shards in order)."""
        bad = outside(np.asarray(ids).reshape(-1), self.vocab) if self.vocab else None
        if bad is None:
            return
        at = start + bad if start is not None else self._first_outside()
        i = int(np.searchsorted(self.ends, at, side="right"))
        path, first = self.files[i], int(self.ends[i - 1]) if i else 0
        raise DataError(f"prepared shard {path} holds token id {self[at:at + 1][0]} (its token {at - first}), outside "
                        f"the vocabulary of {self.vocab} ids of tokenizer {self.tokenizer}; it was overwritten or "
                        f"prepared with another tokenizer: {rebuild(os.path.dirname(path))}")

    def _first_outside(self) -> int:
        step = 1 << 22
        for at in range(0, len(self), step):
            bad = outside(self[at:at + step], self.vocab)
            if bad is not None:
                return at + bad
        raise DataError(f"a token id outside the vocabulary of {self.vocab} ids was read from {self.roots}, but the "
                        f"shards no longer hold it (rewritten meanwhile?); {rebuild(self.roots[0])}")

    def __del__(self):
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
