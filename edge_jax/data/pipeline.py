"""The training iterator and evaluation batches, from prepared token shards or streamed from the files.

Prepared (:mod:`edge_jax.data.shards`; built-in and TFDS datasets always, file corpora after ``edge-jax
data prepare`` or with ``data.stream=off``): a split is tokenised once into a flat token stream, every
document followed by eos; a combined dataset (a+b) trains on its parts' streams one after another.
Training windows hold seq_len + 1 tokens with stride seq_len, so every token after the first is a target
exactly once per epoch: inputs = window[:-1], targets = window[1:]. One global order (grain's shuffle of
all windows, a new order every epoch, repeated forever) is cut into global batches of data.batch_size
rows; a process reads only its block of rows of each (the rows its devices hold), so the global batches
are the same rows in the same order whatever the number of processes. Its state is the number of
global batches read.

Streamed (:mod:`edge_jax.data.stream`; file corpora with no prepared shards, or ``data.stream=on``):
every row of the global batch is a stream of its own over a share of the files, tokenised as it is
read, so memory and the time to the first batch do not grow with the corpus.

Evaluation reads a split's first windows in order, the same from shards or from the files.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from edge_jax.data.errors import DataError
from edge_jax.data.file_sources import FORMATS
from edge_jax.data.shards import TokenShards, doc_tokens, is_prepared, prepare, shards_dir
from edge_jax.data.sources import Source, data_dir_default, resolve_cfg
from edge_jax.data.tokenizers import tokenizer_dtype

_READ_THREADS = 2
_PREFETCH_BATCHES = 4


def tokens_dir(data_cfg) -> str:
    """Where prepared shards live: data.tokens_dir, else <data.data_dir>/tokens."""
    return getattr(data_cfg, "tokens_dir", "") or os.path.join(
        getattr(data_cfg, "data_dir", "") or data_dir_default(), "tokens")


def split_tokens(source: Source, split: str, tok, data_dir: str, where: str = "") -> TokenShards:
    """A split's flat token stream (random access; prepared under ``where`` or <data_dir>/tokens on
    first use). A combined dataset's train split is its parts' streams one after another."""
    where = where or os.path.join(data_dir or data_dir_default(), "tokens")
    leaves = (source.parts if split == "train" else source.parts[:1]) if source.parts else (source,)
    return TokenShards([_prepared(leaf, split, tok, where) for leaf in leaves], tok.vocab_size, tok.name)


def _prepared(leaf: Source, split: str, tok, where: str) -> str:
    if leaf.parts:
        raise DataError(f"dataset '{leaf.name}' nests a mixture; write it as one a+b+c")
    return prepare(leaf, split, tok, where)


def streams(data_cfg, source: Source, tok) -> bool:
    """Whether training streams from the files (data.stream: on / off / auto; see the module docstring)."""
    mode = getattr(data_cfg, "stream", "auto")
    if mode != "auto":
        return mode == "on"
    leaves = source.parts or (source,)
    where = tokens_dir(data_cfg)
    return any(leaf.name.split(":")[0] in FORMATS and not is_prepared(shards_dir(where, leaf, "train", tok))
               for leaf in leaves)


class Windows:
    """Random-access view of the training windows of a split: item i is int32[seq_len+1]."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.total = (len(tokens) - 1) // seq_len

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.total:
            raise IndexError(i)
        start = i * self.seq_len
        return np.asarray(self.tokens[start:start + self.seq_len + 1], dtype=np.int32)

    def rows(self, indices) -> np.ndarray:
        """int32[len(indices), seq_len+1]: windows ``indices`` read together (:meth:`TokenShards.windows`: one
        round of requests for a batch from a bucket), equal to ``np.stack([self[i] for i in indices])``."""
        indices = np.asarray(indices, np.int64).reshape(-1)
        if len(indices) and not (0 <= indices.min() and indices.max() < self.total):
            raise IndexError(f"windows {indices.min()}..{indices.max()} outside 0..{self.total - 1}")
        if not isinstance(self.tokens, TokenShards):
            return np.stack([self[int(i)] for i in indices]).astype(np.int32)
        return self.tokens.windows(indices * self.seq_len, self.seq_len + 1).astype(np.int32)

    def blocks(self, ids, per: int) -> np.ndarray:
        """The windows of blocks ``ids`` of ``per`` consecutive windows each (block b: windows b*per ..
        b*per+per-1), block after block: int32[len(ids) * per, seq_len+1]."""
        ids = np.asarray(ids, np.int64).reshape(-1, 1)
        return self.rows((ids * per + np.arange(per)).reshape(-1))


def _check_sizes(data_cfg, blocks: int) -> tuple[int, int]:
    seq_len, batch = int(data_cfg.seq_len), int(data_cfg.batch_size)
    if seq_len < 1 or batch < 1:
        raise DataError(f"data.seq_len ({seq_len}) and data.batch_size ({batch}) must be positive; "
                        "set them to positive integers")
    if batch % blocks:
        raise DataError(f"data.batch_size {batch} is not divisible by the {blocks} processes; "
                        f"use a multiple of {blocks}")
    return seq_len, batch


def make_train_iter(data_cfg, tok, seed: int, block: int = 0, blocks: int = 1):
    """Endless iterator of {'inputs', 'targets'}: int32[batch_size // blocks, seq_len], rows
    ``block * batch_size // blocks`` onward of each global batch (:func:`edge_jax.sharding.process_block`
    gives a process its block). It has get_state() -> JSON-able dict (the same in every process: every
    process calls it at the same step), local_state() / global_state(local) (the same state in two parts,
    so a snapshot can be taken at every batch: :class:`edge_jax.train.feed.DeviceFeed`) and
    set_state(state); restoring a state replays exactly the
    batches that followed it. Deterministic given (data, tokenizer, seed), whatever ``blocks`` is."""
    seq_len, batch = _check_sizes(data_cfg, blocks)
    if not 0 <= block < blocks:
        raise DataError(f"row block {block} is outside 0..{blocks - 1}; pass "
                        "edge_jax.sharding.process_block(batch sharding, data.batch_size)")
    local = batch // blocks
    source = resolve_cfg(data_cfg)
    if streams(data_cfg, source, tok):
        from edge_jax.data.stream import PIECES_PER_ROW, Plan, StreamIterator
        plan = Plan(tuple(source.pieces("train", PIECES_PER_ROW * batch)), batch, seq_len,
                    int(getattr(data_cfg, "shuffle_windows", 64)), int(seed) % 2**32, tok)
        return StreamIterator(plan, range(block * local, (block + 1) * local), int(getattr(data_cfg, "workers", 0)))
    import grain

    from edge_jax.data.stream import to_io
    tokens = split_tokens(source, "train", tok, "", tokens_dir(data_cfg))
    windows = Windows(tokens, seq_len)
    if windows.total < batch:
        raise DataError(
            f"dataset '{source.name}' train split has {len(tokens)} tokens, {windows.total} windows "
            f"of data.seq_len {seq_len} (+1), fewer than one batch of {batch}; lower data.seq_len to "
            f"at most {max(1, (len(tokens) - 1) // batch)} or data.batch_size, or use more data")
    per = int(getattr(data_cfg, "windows_per_read", 1))
    if local % per:
        raise DataError(f"data.windows_per_read={per} does not divide the {local} rows a process reads per batch; "
                        f"use a divisor of {local}")
    # The shuffled units are blocks of `per` consecutive windows (1: single windows), each read with the
    # others of its batch in one round of requests; a block's windows touch, so it is one ranged read.
    ds = (grain.MapDataset.range(windows.total // per)
          .shuffle(seed=int(seed) % 2**32)
          .repeat()
          .batch(local // per, drop_remainder=True)[block::blocks]   # global batch k = local batches k*blocks ...
          .map(functools.partial(windows.blocks, per=per))
          .map(functools.partial(_checked, tokens))            # ids in the vocabulary: one max per batch
          .map(to_io))
    options = grain.ReadOptions(num_threads=_READ_THREADS, prefetch_buffer_size=_PREFETCH_BATCHES)
    return WindowIterator(iter(ds.to_iter_dataset(options)))


def _checked(tokens: TokenShards, windows: np.ndarray) -> np.ndarray:
    tokens.check(windows)
    return windows


class WindowIterator:
    """grain's iterator over the shuffled windows, with the state methods every training iterator has:
    ``get_state`` / ``set_state``, and ``local_state()`` (a snapshot, cheap enough for every step) with
    ``global_state(local)`` (the checkpointable state of a snapshot: here the same in every process,
    the number of global batches read)."""

    def __init__(self, it):
        self._it = it

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        return next(self._it)

    def get_state(self) -> dict:
        return self._it.get_state()

    def set_state(self, state: dict) -> None:
        self._it.set_state(state)

    def local_state(self) -> dict:
        return self._it.get_state()

    def global_state(self, local: dict) -> dict:
        return local

    def close(self) -> None:
        if hasattr(self._it, "close"):
            self._it.close()


def eval_windows(tokens: np.ndarray, seq_len: int, pad_id: int):
    """All windows of a split, the last one padded: (windows int32[N, T+1], mask float32[N, T]).
    The mask sums to len(tokens) - 1: every token after the first is a target exactly once."""
    tokens = np.asarray(tokens)
    n_targets = len(tokens) - 1
    full, rest = divmod(n_targets, seq_len)
    count = full + (rest > 0)
    windows = np.full((count, seq_len + 1), pad_id, dtype=np.int32)
    mask = np.zeros((count, seq_len), dtype=np.float32)
    if full:
        index = np.arange(full)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
        windows[:full] = tokens[index]
        mask[:full] = 1.0
    if rest:
        windows[full, :rest + 1] = tokens[full * seq_len:]
        mask[full, :rest] = 1.0
    return windows, mask


def _first_tokens(data_cfg, source: Source, split: str, tok, count: int) -> np.ndarray:
    """The first ``count`` tokens of a split (all of them when count is 0), from shards or streamed."""
    if not streams(data_cfg, source, tok):
        tokens = split_tokens(source, split, tok, "", tokens_dir(data_cfg))
        ids = tokens[0:count or len(tokens)]
        tokens.check(ids, 0)
        return ids
    leaf = source.parts[0] if source.parts else source
    out, have = [], 0
    for piece in leaf.pieces(split):
        for ids in doc_tokens(piece.texts(), tok, tokenizer_dtype(tok)):
            out.append(ids)
            have += len(ids)
            if count and have >= count:
                return np.concatenate(out)[:count]
    return np.concatenate(out) if out else np.zeros(0, tokenizer_dtype(tok))


def make_eval_batches(data_cfg, tok, split: str = "validation", num_batches: int = 0) -> list[dict]:
    """Batches {'inputs', 'targets', 'mask'} of global size data.batch_size covering `split` in
    order (num_batches = 0: all of it, else the first num_batches). mask is 1.0 on real targets
    and 0.0 on the padding of the last window and of the rows that fill the last batch."""
    seq_len, batch = _check_sizes(data_cfg, 1)
    source = resolve_cfg(data_cfg)
    tokens = _first_tokens(data_cfg, source, split, tok, int(num_batches) * batch * seq_len + 1 if num_batches else 0)
    if len(tokens) < 2:
        raise DataError(f"dataset '{source.name}' split '{split}' has {len(tokens)} token; "
                        "evaluate on a larger split")
    windows, mask = eval_windows(tokens, seq_len, tok.pad_id)
    n = -(-len(windows) // batch)
    if num_batches:
        n = min(n, int(num_batches))
    out = []
    for b in range(n):
        w, m = windows[b * batch:(b + 1) * batch], mask[b * batch:(b + 1) * batch]
        if len(w) < batch:
            w = np.concatenate([w, np.full((batch - len(w), seq_len + 1), tok.pad_id, np.int32)])
            m = np.concatenate([m, np.zeros((batch - len(m), seq_len), np.float32)])
        out.append({"inputs": w[:, :-1], "targets": w[:, 1:], "mask": m})
    return out
