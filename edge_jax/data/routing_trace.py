"""Routing traces: which experts a MoE model picked for every token (for expert-cache studies).

A trace records one model run over text (a held-out or a training split): for each token, at each MoE
layer, its top-k experts (best first) and, unless left out, their router probabilities. An expert-cache
simulator replays it; a learned expert predictor may also read the token ids and the model's frozen
token embeddings.

On-disk format, version 1: one ``.npz`` file (a zip of ``.npy`` arrays, as ``np.savez`` writes it,
possibly deflate-compressed), all arrays little-endian and C-ordered; N tokens, S sequences, L MoE
layers, top-k K, vocabulary V, embedding width D:

=============  ===========  ============  =========================================================
array          dtype        shape         meaning
=============  ===========  ============  =========================================================
``header``     unicode      ()            JSON text, see below
``tokens``     int32        [N]           token ids of the traced sequences, concatenated
``seq_starts`` int64        [S]           offset of each sequence's first token in ``tokens``:
                                          first is 0, strictly increasing, each < N (S = 0 iff N = 0)
``experts``    int16        [N, L, K]     top-k expert ids per token and MoE layer, best first,
                                          distinct, in [0, n_experts)
``probs``      float32      [N, L, K]     their router probabilities: the softmax over all
                                          experts, before any top-k renormalisation; in [0, 1],
                                          non-increasing along K; optional (absent when recorded
                                          with ``edge-jax moe trace --no-probs``)
``embeddings`` float32      [V, D]        the model's frozen token-embedding table; optional
                                          (absent when not recorded); every token id is < V
=============  ===========  ============  =========================================================

The header (``json.loads(str(z["header"]))``) is an object with keys:
``format`` ("edge_jax.routing_trace"), ``version`` (1), ``n_experts`` (int), ``top_k`` (int),
``layers`` (list of L ints: the model layer index of each MoE layer, in the order of axis 1),
``meta`` (free JSON provenance: workdir, dataset, split, tokenizer, git commit, config summary...),
and ``arrays``: ``{name: {"dtype": numpy dtype str e.g. "<i2", "shape": [...], "sha256": hex
digest of the array's raw C-order bytes}}`` for every array in the file but ``header``.

Reading without edge_jax::

    z = np.load("trace.npz", allow_pickle=False)
    header = json.loads(str(z["header"]))
    experts = z["experts"]                       # [N, L, K]
    probs = z["probs"] if "probs" in z.files else None
    bounds = list(z["seq_starts"]) + [len(z["tokens"])]
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edge_jax.data.errors import DataError
from edge_jax.utils import storage
from edge_jax.utils.atomic import atomic_open

FORMAT_VERSION = 1
FORMAT_NAME = "edge_jax.routing_trace"
RECORD_HINT = "record one with `edge-jax moe trace --workdir W --out DIR`"
_DTYPES = {"tokens": np.int32, "seq_starts": np.int64, "experts": np.int16,
           "probs": np.float32, "embeddings": np.float32}
_OPTIONAL = ("probs", "embeddings")  # arrays a trace may leave out


class TraceError(DataError):
    """A routing trace that cannot be read or is inconsistent; the message says how to fix it."""


@dataclasses.dataclass(frozen=True, eq=False)
class RoutingTrace:
    tokens: np.ndarray        # int32 [N]
    seq_starts: np.ndarray    # int64 [S]
    experts: np.ndarray       # int16 [N, L, K]
    probs: np.ndarray | None  # float32 [N, L, K]; None: recorded without router probabilities
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    embeddings: np.ndarray | None = None  # float32 [V, D]
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))
        object.__setattr__(self, "n_experts", int(self.n_experts))
        object.__setattr__(self, "top_k", int(self.top_k))

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def router_probs(self, needed_by: str) -> np.ndarray:
        """``probs``, or a one-line TraceError naming ``needed_by`` when the trace was recorded without them."""
        if self.probs is None:
            _fail(f"{needed_by} needs router probabilities, but this routing trace was recorded without them "
                  f"(`edge-jax moe trace --no-probs`); re-record it without --no-probs")
        return self.probs

    def sequences(self) -> Iterator[tuple[int, int]]:
        """Yield ``(start, stop)`` of each sequence: ``tokens[start:stop]`` is one sequence."""
        stops = [*self.seq_starts[1:].tolist(), self.n_tokens]
        yield from zip(self.seq_starts.tolist(), stops)

    def validate(self) -> RoutingTrace:
        """Check dtypes, shapes and value ranges against the format; raise TraceError. Returns self."""
        for name, dtype in _DTYPES.items():
            a = getattr(self, name)
            if a is None and name in _OPTIONAL:
                continue
            if not isinstance(a, np.ndarray) or a.dtype != dtype:
                got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
                _fail(f"{name} must be a {np.dtype(dtype)} array, not {got}; convert it with .astype")
        n, lkk = self.n_tokens, (self.n_tokens, self.n_layers, self.top_k)
        if self.tokens.ndim != 1 or self.seq_starts.ndim != 1:
            _fail(f"tokens and seq_starts must be 1-D, not {self.tokens.shape} and {self.seq_starts.shape}")
        if not 1 <= self.n_experts <= np.iinfo(np.int16).max or not 1 <= self.top_k <= self.n_experts:
            _fail(f"need 1 <= top_k <= n_experts <= 32767, got top_k={self.top_k}, n_experts={self.n_experts}")
        if len(set(self.layers)) != len(self.layers) or any(i < 0 for i in self.layers):
            _fail(f"layers must be distinct non-negative layer indices, got {list(self.layers)}")
        for name in ("experts", "probs"):
            if getattr(self, name) is not None and getattr(self, name).shape != lkk:
                _fail(f"{name} has shape {getattr(self, name).shape}, expected [N, L, K] = {list(lkk)} "
                      f"(N tokens, L = len(layers), K = top_k)")
        s = self.seq_starts
        if (n == 0) != (s.size == 0) or (s.size and (s[0] != 0 or s[-1] >= n or np.any(np.diff(s) <= 0))):
            _fail(f"seq_starts must start at 0, increase strictly and stay < {n} tokens; "
                  f"got {s[:5].tolist()}{'...' if s.size > 5 else ''} (len {s.size})")
        if self.experts.size and (self.experts.min() < 0 or self.experts.max() >= self.n_experts):
            _fail(f"expert ids must lie in [0, {self.n_experts}), got [{self.experts.min()}, "
                  f"{self.experts.max()}]; check n_experts")
        if self.top_k > 1 and np.any(np.diff(np.sort(self.experts, axis=-1), axis=-1) == 0):
            _fail("a token picked the same expert twice at one layer; top-k experts must be distinct")
        p = self.probs
        if p is not None and (not np.all(np.isfinite(p)) or (p.size and (p.min() < 0 or p.max() > 1))):
            _fail("probs must be finite router probabilities in [0, 1]")
        if p is not None and np.any(p[..., 1:] > p[..., :-1]):
            _fail("probs must be non-increasing along top-k (experts best first)")
        if self.embeddings is not None:
            e = self.embeddings
            if e.ndim != 2 or not np.all(np.isfinite(e)):
                _fail(f"embeddings must be a finite [V, D] table, got shape {e.shape}")
            if n and (self.tokens.min() < 0 or self.tokens.max() >= e.shape[0]):
                _fail(f"token ids must lie in [0, V={e.shape[0]}) of the embedding table, got "
                      f"[{self.tokens.min()}, {self.tokens.max()}]")
        elif n and self.tokens.min() < 0:
            _fail(f"token ids must be non-negative, got {self.tokens.min()}")
        try:
            json.dumps(self.meta, allow_nan=False)
        except (TypeError, ValueError) as e:
            _fail(f"meta must be JSON-serialisable ({e}); store paths and numbers as str/int/float")
        return self


def _fail(msg: str):
    raise TraceError(msg)


def _arrays(trace: RoutingTrace) -> dict[str, np.ndarray]:
    names = [k for k in _DTYPES if getattr(trace, k) is not None]
    return {k: np.ascontiguousarray(getattr(trace, k), dtype=np.dtype(_DTYPES[k]).newbyteorder("<"))
            for k in names}


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).reshape(-1).view(np.uint8)).hexdigest()


def write_trace(path: str | os.PathLike, trace: RoutingTrace, *, compress: bool = False) -> Path:
    """Validate `trace` and write it to `path` (a ``.npz``) atomically; returns the path."""
    trace.validate()
    arrays = _arrays(trace)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "n_experts": trace.n_experts,
              "top_k": trace.top_k, "layers": list(trace.layers), "meta": trace.meta,
              "arrays": {k: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _sha256(a)}
                         for k, a in arrays.items()}}
    save = np.savez_compressed if compress else np.savez
    with atomic_open(path, "wb") as f:
        save(f, header=np.array(json.dumps(header, allow_nan=False)), **arrays)
    return storage.path(path)


def read_trace(path: str | os.PathLike) -> RoutingTrace:
    """Load and check a trace written by :func:`write_trace` (on a disk or in a bucket); any problem is a
    one-line TraceError."""
    path = storage.path(path)
    if not path.exists():
        _fail(f"routing trace {path} not found; {RECORD_HINT}")
    if path.is_dir():
        _fail(f"{path} is a directory; pass the trace .npz file inside it")
    try:
        trace = _load(path)
    except TraceError as e:
        raise TraceError(f"routing trace {path}: {e}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, TypeError,
            AttributeError, OSError) as e:
        why = f"{type(e).__name__}: {e}".replace("\n", " ")
        raise TraceError(f"routing trace {path} is truncated or corrupt ({why}); "
                         f"re-record it with `edge-jax moe trace`") from None
    return trace


def _load(path: Path) -> RoutingTrace:
    redo = "the file is corrupt, re-record it with `edge-jax moe trace`"
    z = np.load(io.BytesIO(path.read_bytes()) if storage.is_remote(path) else path, allow_pickle=False)
    if isinstance(z, np.ndarray):
        _fail(f"not a routing trace (a single .npy array, not a .npz); {RECORD_HINT}")
    with z:
        if "header" not in z.files:
            _fail(f"not a routing trace (no header array); {RECORD_HINT}")
        header = json.loads(str(z["header"]))
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            _fail(f"not a routing trace (header format is not {FORMAT_NAME!r}); {RECORD_HINT}")
        if header.get("version") != FORMAT_VERSION:
            _fail(f"trace format version {header.get('version')}, this edge_jax reads version "
                  f"{FORMAT_VERSION}; re-record it with `edge-jax moe trace`")
        specs, held = header["arrays"], set(z.files) - {"header"}
        if set(specs) != held:
            _fail(f"header lists arrays {sorted(specs)} but the file holds {sorted(held)}; {redo}")
        lacking = sorted(set(_DTYPES) - set(_OPTIONAL) - held)
        if lacking:
            _fail(f"the file lacks the required array(s) {lacking}; {redo}")
        arrays = {k: z[k] for k in specs}
    for k, a in arrays.items():
        want = specs[k]
        if a.dtype.str != want["dtype"] or list(a.shape) != list(want["shape"]):
            _fail(f"array {k} is {a.dtype.str} {list(a.shape)} but the header says "
                  f"{want['dtype']} {want['shape']}; {redo}")
        if _sha256(a) != want["sha256"]:
            _fail(f"array {k} fails its sha256 checksum; {redo}")
    trace = RoutingTrace(layers=header["layers"], n_experts=header["n_experts"],
                         top_k=header["top_k"], meta=header.get("meta", {}),
                         **{k: arrays.pop(k, None) for k in _OPTIONAL}, **arrays)
    return trace.validate()
