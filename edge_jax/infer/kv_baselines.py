"""Long-context KV methods (``longctx.method``): the registry :data:`KV_METHODS` and the generic
KV-cache baselines FullKV, StreamingLLM, SnapKV and PyramidKV.

A method is a session class registered under its name where it is defined (the baselines here, a
paper's own method in its package)::

    @KV_METHODS.register("fullkv")
    class FullKVSession(CacheSession): ...

A class has ``label`` (its name in reports), ``base_lm`` (True: a cache policy over the base LM as
trained, so a comparison's cell evaluates that LM; False: the method needs params trained for it),
``validate(config, budget)`` (a one-line ConfigError for a config it cannot run) and
``from_config(model, params, config, budget) -> session``, where ``budget`` is ``longctx.budget``,
the KV slots per layer. A session has ``prefill(tokens_BT)`` and ``step(token_B1)`` returning the
last logits [B, V], its per-layer caches (:mod:`edge_jax.infer.kv_state`: GQA keys and values or MLA
latents) as ``caches`` and an optional ``probe`` (:class:`edge_jax.infer.kv_state.PeakProbe`). A new
baseline is one class and its registration: the harness (:mod:`edge_jax.infer.longctx`), config
validation and comparison grids built from the registry pick it up. Importing :mod:`edge_jax.infer`
registers the baselines below; the papers register theirs when the bootstrap imports them
(:func:`edge_jax.plugins.load`).

The baselines hold at most ``budget`` prompt tokens per layer after prefill (FullKV: all of them) and
append the generated tokens after those (``extra`` slots, ``longctx.answer_tokens``).

- FullKV: prefill in chunks of ``chunk`` tokens (``longctx.prefill_chunk``) at their own positions;
  the whole prompt stays; ``budget`` is not used.
- SnapKV: FullKV's prefill; the last ``obs_window`` prompt queries vote (attention summed over them
  and over each group's query heads, pooled with ``kernel``) for the earlier slots; each KV head keeps
  its top ``budget - obs_window`` and the observation window. Positions stay the original ones.
- PyramidKV: SnapKV's selection with per-layer budgets falling with depth (same average).
- StreamingLLM: the prompt streams through a cache of ``sink`` (``longctx.sink``) first tokens and the
  most recent ones, in chunks of ``(budget - sink) // 2``; after each chunk only sink + recent stay,
  and positions are re-assigned inside the cache (slot i is read at position i), so no position
  exceeds the cache.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.infer.kv_select import pyramid_budgets, snapkv_indices, streaming_indices
from edge_jax.infer.kv_state import SLOT_ARRAYS, empty_caches, first_slots, pad_slots, run_chunk, take_slots, write
from edge_jax.registry import Registry

KV_METHODS: Registry = Registry("KV method", key="longctx.method")

_select = jax.jit(snapkv_indices, static_argnames=("budget", "window", "kernel", "kind"))


class CacheSession:
    """Decoding after a prefill: each layer appends at its own next free slot."""
    label = ""
    base_lm = True  # a cache policy over the base LM as trained

    @classmethod
    def validate(cls, config, budget: int) -> None:
        """Raise a one-line ConfigError if ``config`` cannot run this method with ``budget`` slots."""

    def __init__(self, model, params, probe=None):
        self.model, self.params, self.cfg = model, params, model.cfg
        self.probe = probe  # a kv_state.PeakProbe to account the memory of every chunk step

    def _run(self, tokens_BT, pos_BT, real=None, votes: int = 0, slots: int | None = None):
        """One chunk after the first ``slots`` cache slots (default all)."""
        T = tokens_BT.shape[1]
        caches = self.caches if slots is None else [first_slots(c, slots) for c in self.caches]
        args = (self.model, self.params, jnp.asarray(tokens_BT, jnp.int32), jnp.asarray(pos_BT, jnp.int32), caches)
        kwargs = dict(votes=votes, real=T if real is None else real)
        if self.probe is not None:
            self.probe(*args, **kwargs)
        return run_chunk(*args, **kwargs)

    def _store(self, extras, pos_BT, count: int, T: int):
        self.caches = [write(c, e, jnp.asarray(pos_BT, jnp.int32), n, count)
                       for c, e, n in zip(self.caches, extras, self.next_slot)]
        self.next_slot = [n + count for n in self.next_slot]

    def _prefill_full(self, tokens_BT, capacity: int, chunk: int, votes: int = 0):
        """Chunked full-attention prefill; the first chunk is the short one, so the last is whole.
        Returns the last logits and, with ``votes``, per-layer slot votes [B, G, capacity]."""
        B, L = tokens_BT.shape
        self.caches = empty_caches(self.cfg, B, capacity)
        self.next_slot = [0] * self.cfg.n_layers
        sizes = ([L % chunk] if L % chunk else []) + [chunk] * (L // chunk)
        start, logits, extras = 0, None, None
        for size in sizes:
            piece = np.zeros((B, chunk), np.int32)
            piece[:, :size] = tokens_BT[:, start:start + size]
            pos = np.broadcast_to(start + np.arange(chunk), (B, chunk))
            last = start + size == L
            slots = min(capacity, -(-start // chunk) * chunk)  # the filled slots, in few distinct sizes
            logits, extras = self._run(piece, pos, real=size, votes=votes if last else 0, slots=slots)
            self._store(extras, pos, size, chunk)
            start += size
        slot_votes = None
        if votes:  # the last chunk's votes over [its prefix slots, its own tokens] -> cache slots
            slot_votes = [jax.lax.dynamic_update_slice(jnp.zeros(e["votes"].shape[:2] + (capacity,), e["votes"].dtype),
                                                       e["votes"][:, :, :slots], (0, 0, 0)) +
                          jax.lax.dynamic_update_slice(jnp.zeros(e["votes"].shape[:2] + (capacity,), e["votes"].dtype),
                                                       e["votes"][:, :, slots:], (0, 0, L - sizes[-1]))
                          for e in extras]
        return logits[:, sizes[-1] - 1], slot_votes

    def step(self, token_B1):
        token_B1 = np.asarray(token_B1, np.int32).reshape(-1, 1)
        pos = np.full_like(token_B1, self.position)
        logits, extras = self._run(token_B1, pos)
        self._store(extras, pos, 1, 1)
        self.position += 1
        return logits[:, 0]


@KV_METHODS.register("fullkv")
class FullKVSession(CacheSession):
    label = "FullKV"

    @classmethod
    def from_config(cls, model, params, config, budget: int):
        return cls(model, params, config.longctx.prefill_chunk, config.longctx.answer_tokens)

    def __init__(self, model, params, chunk: int, extra: int, probe=None):
        super().__init__(model, params, probe)
        self.chunk, self.extra = chunk, extra

    def prefill(self, tokens_BT):
        tokens_BT = np.asarray(tokens_BT, np.int32)
        L = tokens_BT.shape[1]
        capacity = -(-(L + self.extra) // self.chunk) * self.chunk + self.chunk  # few distinct shapes
        logits, _ = self._prefill_full(tokens_BT, capacity, self.chunk)
        self.position = L
        return logits


@KV_METHODS.register("streamingllm")
class StreamingSession(CacheSession):
    label = "StreamingLLM"

    @classmethod
    def from_config(cls, model, params, config, budget: int):
        return cls(model, params, budget, config.longctx.sink, config.longctx.answer_tokens)

    @classmethod
    def validate(cls, config, budget: int) -> None:
        sink = config.longctx.sink
        if not 0 <= sink < budget:
            raise ConfigError(f"longctx.sink={sink} must lie in [0, longctx.budget={budget}) (StreamingLLM keeps "
                              "sink + recent tokens in the budget); e.g. longctx.budget=2048, longctx.sink=4")

    def __init__(self, model, params, budget: int, sink: int, extra: int, probe=None):
        super().__init__(model, params, probe)
        self.budget, self.sink = budget, sink
        self.chunk = max(1, (budget - sink) // 2)
        self.capacity = budget + max(self.chunk, extra)

    def _evict(self):
        """Keep the sink and the most recent tokens; re-assign positions to slots."""
        n = self.next_slot[0]
        if n <= self.budget:
            return
        B, G, _ = self.caches[0]["pos"].shape
        idx_BP, _ = streaming_indices(jnp.full((B,), n), self.sink, self.budget - self.sink, n)
        idx_BGP = jnp.broadcast_to(idx_BP[:, None], (B, G, self.budget))
        self.caches = [self._kept(c, take_slots(c, idx_BGP)) for c in self.caches]
        self.next_slot = [self.budget] * self.cfg.n_layers

    def _kept(self, cache, kept):
        """The kept slots first, read at positions 0 ..; the rest empty."""
        out = {name: jnp.zeros_like(a).at[:, :self.budget].set(kept[name]) for name, a in cache.items()
               if name not in SLOT_ARRAYS}
        out["pos"] = jnp.broadcast_to(jnp.arange(cache["pos"].shape[-1], dtype=jnp.int32), cache["pos"].shape)
        out["valid"] = jnp.broadcast_to(jnp.arange(cache["valid"].shape[-1]) < self.budget, cache["valid"].shape)
        return out

    def prefill(self, tokens_BT):
        tokens_BT = np.asarray(tokens_BT, np.int32)
        B, L = tokens_BT.shape
        self.caches = empty_caches(self.cfg, B, self.capacity)
        self.next_slot = [0] * self.cfg.n_layers
        logits, last = None, 0
        for start in range(0, L, self.chunk):
            size = min(self.chunk, L - start)
            piece = np.zeros((B, self.chunk), np.int32)
            piece[:, :size] = tokens_BT[:, start:start + size]
            n = self.next_slot[0]
            pos = np.broadcast_to(n + np.arange(self.chunk), (B, self.chunk))
            logits, extras = self._run(piece, pos, real=size)
            self._store(extras, pos, size, self.chunk)
            last = size
            self._evict()
        self.position = self.next_slot[0]
        return logits[:, last - 1]

    def step(self, token_B1):
        if self.next_slot[0] >= self.capacity:
            self._evict()
        self.position = self.next_slot[0]
        return super().step(token_B1)


@KV_METHODS.register("snapkv")
class SnapKVSession(CacheSession):
    """SnapKV (``pyramid=False``) or PyramidKV (``pyramid=True``)."""
    label = "SnapKV"
    pyramid = False

    @classmethod
    def validate(cls, config, budget: int) -> None:
        window = config.longctx.obs_window
        if not 0 < window < budget:
            raise ConfigError(f"longctx.obs_window={window} must lie in [1, longctx.budget={budget}); e.g. "
                              "longctx.budget=2048, longctx.obs_window=8")
        if config.longctx.pool_kernel <= 0 or config.longctx.pool_kernel % 2 == 0:
            raise ConfigError(f"longctx.pool_kernel={config.longctx.pool_kernel} must be a positive odd number, e.g. 7")

    @classmethod
    def from_config(cls, model, params, config, budget: int):
        lc = config.longctx
        return cls(model, params, lc.prefill_chunk, lc.answer_tokens, budget, lc.obs_window, lc.pool_kernel,
                   pyramid=cls.pyramid, beta=lc.pyramid_beta)

    def __init__(self, model, params, chunk: int, extra: int, budget: int, obs_window: int, kernel: int,
                 pyramid: bool = False, beta: float = 20.0, probe=None):
        super().__init__(model, params, probe)
        self.chunk, self.extra, self.obs_window, self.kernel = chunk, extra, obs_window, kernel
        n = model.cfg.n_layers
        self.budgets = pyramid_budgets(n, budget, obs_window, beta) if pyramid else [budget] * n

    def prefill(self, tokens_BT):
        tokens_BT = np.asarray(tokens_BT, np.int32)
        B, L = tokens_BT.shape
        capacity = -(-L // self.chunk) * self.chunk + self.chunk
        logits, votes = self._prefill_full(tokens_BT, capacity, self.chunk, votes=self.obs_window)
        valid_BS = jnp.broadcast_to(jnp.arange(capacity) < L, (B, capacity))
        caches, slots = [], []
        for cache, vote, budget in zip(self.caches, votes, self.budgets):
            idx, keep = _select(vote, valid_BS, budget=budget, window=self.obs_window, kernel=self.kernel)
            kept = take_slots(cache, idx)
            caches.append(pad_slots(dict(kept, valid=keep & kept["valid"]), self.extra))  # room for the answer
            slots.append(budget)
        self.caches, self.next_slot, self.position = caches, slots, L
        return logits


@KV_METHODS.register("pyramidkv")
class PyramidKVSession(SnapKVSession):
    """SnapKV's selection with per-layer budgets falling with depth."""
    label = "PyramidKV"
    pyramid = True
