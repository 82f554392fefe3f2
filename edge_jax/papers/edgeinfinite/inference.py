"""EdgeInfinite inference, Algorithm 1: prefill and decode with sink tokens, window tokens and memory.

Prefill of L tokens: shorter than sink + window + segment, everything stays in the KV cache (the
base model's attention). Otherwise the sink tokens' KV is kept, each of the N = (L - sink -
window) // segment full segments runs with the sink tokens in front and is compressed into every
layer's memory, and the remaining tokens (at least ``window``) are kept as KV cache after the sink.
Decoding appends to the cache; when the tokens after the sink reach window + segment, the oldest
segment is compressed (run again with only the sink in front) and the last ``window`` tokens are
recomputed against the sink and the updated memory. Positions are slots of this local cache (sink
at 0 .., the rest from ``sink`` on), so the model never sees a position past sink + window + segment.

A window of 0 (``model.infini_keep_window=false``, Table 2) keeps just the newest token; a sink of
0 (``infini_keep_sink=false``) compresses from the first token on.

Every chunk has a fixed length (sink, segment, window, one token, and the prefill's remaining part
padded to window + segment), so a whole run compiles six small steps and its memory does not grow
with the input: the cache holds at most sink + window + segment slots per layer.

The session is the ``edgeinfinite`` method of :data:`edge_jax.infer.kv_baselines.KV_METHODS`; it needs
the trained gate (``base_lm = False``), so a comparison grid gives it the gate's cell.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.infer.kv_state import empty_caches, only_first, run_chunk, write
from edge_jax.layers.infini.compressive import empty_memory, segment_layout


@KV_METHODS.register("edgeinfinite")
class EdgeInfiniteSession:
    """One batch of sequences decoded with Algorithm 1 (all rows advance together).

    ``prefill(tokens_BT)`` and ``step(token_B1)`` return the logits [B, V] of the last position."""
    label = "EdgeInfinite"
    base_lm = False  # runs the gate trained on the base

    @classmethod
    def validate(cls, config, budget: int) -> None:
        if not config.model.infini_hidden:
            raise ConfigError("longctx.method=edgeinfinite needs the memory gate: set model.infini_hidden > 0")

    @classmethod
    def from_config(cls, model, params, config, budget: int):
        """Its sizes come from the model (sink, window, segment); ``budget`` is not used."""
        return cls(model, params)

    def __init__(self, model, params, probe=None):
        cfg = model.cfg
        spec = cfg.infini_spec()
        if spec is None:
            raise ValueError("EdgeInfinite inference needs the memory gate: model.infini_hidden > 0")
        self.model, self.params, self.cfg = model, params, cfg
        self.sink, self.segment, self.window_cfg = spec.sink, spec.segment, spec.window
        self.window = max(spec.window, 1)
        self.capacity = self.sink + self.window + self.segment
        self.probe = probe  # a kv_state.PeakProbe to account the memory of every chunk step

    # -- state ---------------------------------------------------------------------------------
    def _reset(self, batch: int):
        self.caches = empty_caches(self.cfg, batch, self.capacity)
        M, z = empty_memory(batch, self.cfg.n_kv_heads, self.cfg.head_dim)
        self.memory = [{"M": M, "z": z} for _ in range(self.cfg.n_layers)]
        self.has_memory = False
        self.filled = 0                          # slots in use
        self.local = np.zeros((batch, 0), np.int32)  # token ids after the sink, for recompression
        self.compressed_segments = 0

    def _run(self, tokens_BT, start: int, caches, real: int | None = None, compress: bool = False):
        """Run a chunk at cache positions ``start ..``; ``real`` tokens of it are not padding."""
        B, T = tokens_BT.shape
        pos_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))
        args = (self.model, self.params, jnp.asarray(tokens_BT, jnp.int32), pos_BT, caches, self.memory,
                self.has_memory)
        kwargs = dict(compress=compress, real=T if real is None else real)
        if self.probe is not None:
            self.probe(*args, **kwargs)
        return run_chunk(*args, **kwargs)

    def _store(self, extras, start: int, count: int, T: int):
        pos_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (extras[0]["k"].shape[0], T))
        self.caches = [write(c, e, pos_BT, start, count) for c, e in zip(self.caches, extras)]

    def _compress(self, segment_BT):
        """get_memory: the segment with the sink tokens in front, folded into every layer's memory."""
        _, extras = self._run(segment_BT, self.sink, [only_first(c, self.sink) for c in self.caches], compress=True)
        self.memory = [{"M": e["M"], "z": e["z"]} for e in extras]
        self.has_memory = True
        self.compressed_segments += 1

    def _local_chunk(self, tokens_BT, pad_to: int):
        """Run tokens right after the sink (padded to ``pad_to``) and keep them as the local cache."""
        B, R = tokens_BT.shape
        padded = np.zeros((B, pad_to), np.int32)
        padded[:, :R] = tokens_BT
        self.caches = [only_first(c, self.sink) for c in self.caches]
        logits, extras = self._run(padded, self.sink, self.caches, real=R)
        self._store(extras, self.sink, R, pad_to)
        self.filled = self.sink + R
        self.local = np.asarray(tokens_BT, np.int32)
        return logits[:, R - 1]

    # -- Algorithm 1 ---------------------------------------------------------------------------
    def prefill(self, tokens_BT):
        tokens_BT = np.asarray(tokens_BT, np.int32)
        B, L = tokens_BT.shape
        self._reset(B)
        layout = segment_layout(L, self.sink, self.window_cfg, self.segment)
        if layout is None:  # short input: plain attention over a full cache
            padded = np.zeros((B, self.capacity), np.int32)
            padded[:, :L] = tokens_BT
            logits, extras = self._run(padded, 0, self.caches, real=L)
            self._store(extras, 0, L, self.capacity)
            self.filled = L
            self.local = tokens_BT[:, self.sink:]
            return logits[:, L - 1]
        S, Lseg = self.sink, self.segment
        if S:
            _, extras = self._run(tokens_BT[:, :S], 0, self.caches)
            self._store(extras, 0, S, S)
        for i in range(layout.n_segments):
            self._compress(tokens_BT[:, S + i * Lseg:S + (i + 1) * Lseg])
        return self._local_chunk(tokens_BT[:, S + layout.n_segments * Lseg:], self.window + self.segment)

    def step(self, token_B1):
        token_B1 = np.asarray(token_B1, np.int32).reshape(-1, 1)
        if self.filled >= self.sink and self.local.shape[1] + 1 - self.window == self.segment:
            self._compress(self.local[:, :self.segment])
            window = np.concatenate([self.local[:, self.segment:], token_B1], axis=1)
            return self._local_chunk(window, self.window)
        logits, extras = self._run(token_B1, self.filled, self.caches)
        self._store(extras, self.filled, 1, 1)
        if self.filled >= self.sink:
            self.local = np.concatenate([self.local, token_B1], axis=1)
        self.filled += 1
        return logits[:, 0]

    def cache_tokens(self) -> int:
        """Tokens held in the KV cache now."""
        return self.filled
