"""Explicit per-layer KV caches and the jitted chunk step that long-context inference is built on.

A layer's cache is a dict of fixed-capacity buffers (static shapes, so one compile serves a whole
run): ``k`` / ``v`` [B, P, G, K] (keys before RoPE), ``pos`` [B, G, P] (the RoPE position each slot
is read at) and ``valid`` [B, G, P]. Keys are kept before RoPE so a policy may re-assign positions
inside the cache; per-group ``pos`` / ``valid`` let a policy keep other tokens for each KV head.
EdgeInfinite adds a memory per layer: ``M`` [B, G, K, K] and ``z`` [B, G, K] (float32).

:func:`run_chunk` pushes one chunk of tokens through the model against these caches
(:func:`edge_jax.layers.infini_attention.context_attention` in every layer) and returns the logits
and, per layer, the chunk's keys / values and, on request, SnapKV votes or the updated memory.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def empty_cache(batch: int, capacity: int, groups: int, head_dim: int, dtype=jnp.float32) -> dict:
    return {"k": jnp.zeros((batch, capacity, groups, head_dim), dtype),
            "v": jnp.zeros((batch, capacity, groups, head_dim), dtype),
            "pos": jnp.zeros((batch, groups, capacity), jnp.int32),
            "valid": jnp.zeros((batch, groups, capacity), bool)}


def empty_caches(cfg, batch: int, capacity) -> list[dict]:
    """One empty cache per layer; ``capacity`` is an int or one int per layer (PyramidKV)."""
    caps = capacity if isinstance(capacity, (list, tuple)) else [capacity] * cfg.n_layers
    return [empty_cache(batch, c, cfg.n_kv_heads, cfg.head_dim, jnp.dtype(cfg.dtype)) for c in caps]


def cache_bytes(caches: list[dict], memory: list[dict] | None = None) -> int:
    """Bytes held by the cache buffers (and memories)."""
    arrays = jax.tree_util.tree_leaves(caches) + jax.tree_util.tree_leaves(memory or [])
    return int(sum(a.size * a.dtype.itemsize for a in arrays))


@jax.jit
def write(cache: dict, k_BTGK, v_BTGK, pos_BT, start, count):
    """Write the first ``count`` of T new tokens at slots ``start ..`` (the rest of T is padding)."""
    B, T, G, _ = k_BTGK.shape
    upd = lambda buf, x, at: jax.lax.dynamic_update_slice(buf, x.astype(buf.dtype), at)  # noqa: E731
    zero = jnp.zeros((), jnp.int32)
    real_BT = jnp.broadcast_to(jnp.arange(T) < count, (B, T))
    P = cache["k"].shape[1]
    # padding rows must not overwrite real slots: keep the old contents where a row is padding
    slot_T = jnp.clip(start + jnp.arange(T), 0, P - 1)
    keep = lambda buf, x: jnp.where(real_BT.reshape(B, T, *([1] * (x.ndim - 2))), x,  # noqa: E731
                                    buf[:, slot_T].astype(x.dtype))
    k_new, v_new = keep(cache["k"], k_BTGK), keep(cache["v"], v_BTGK)
    pos_new = jnp.where(real_BT[:, None], jnp.broadcast_to(pos_BT[:, None], (B, G, T)), cache["pos"][:, :, slot_T])
    valid_new = real_BT[:, None] | cache["valid"][:, :, slot_T]
    return {"k": upd(cache["k"], k_new, (zero, start, zero, zero)),
            "v": upd(cache["v"], v_new, (zero, start, zero, zero)),
            "pos": upd(cache["pos"], pos_new.astype(jnp.int32), (zero, zero, start)),
            "valid": upd(cache["valid"], jnp.broadcast_to(valid_new, (B, G, T)), (zero, zero, start))}


def only_first(cache: dict, count: int) -> dict:
    """The cache with every slot from ``count`` on marked empty (EdgeInfinite keeps the sink)."""
    keep = jnp.arange(cache["valid"].shape[-1]) < count
    return dict(cache, valid=cache["valid"] & keep)


@functools.partial(jax.jit, static_argnames=("model", "votes", "compress"))
def run_chunk(model, params, tokens_BT, positions_BT, caches, memory=None, has_memory=False, *, votes: int = 0,
              compress: bool = False, real=None):
    """``(logits [B, T, V], per-layer extras)`` for a chunk after ``caches`` (and ``memory``).

    ``real`` (int, traced) counts the real tokens of a padded chunk (default all): SnapKV votes come
    from the last ``votes`` real queries, and only real tokens are compressed into the memory."""
    B, T = tokens_BT.shape
    real = T if real is None else real
    real_BT = jnp.broadcast_to(jnp.arange(T) < real, (B, T))
    contexts = []
    for i, cache in enumerate(caches):
        ctx = dict(cache, votes=votes, votes_end=real)
        if memory is not None:
            ctx.update(M=memory[i]["M"], z=memory[i]["z"], has_memory=has_memory, compress=compress,
                       compress_valid=real_BT)
        contexts.append(ctx)
    logits, state = model.apply({"params": params}, tokens_BT, positions_BT, attn_context=contexts,
                                mutable=["intermediates"])
    inter = state["intermediates"]
    extras = [{name: value[0] for name, value in inter[f"layers_{i}"]["attn"].items()} for i in range(len(caches))]
    return logits, extras


class PeakProbe:
    """Keeps the largest XLA-accounted footprint (argument + output + temporary bytes of the compiled
    executable: its peak while it runs, params and caches included) over the :func:`run_chunk` calls
    a session makes. Each call shape is compiled once with exactly the session's arguments, so the
    session's own call reuses that executable; ``shared`` (a dict) lets probes of one model share the
    per-shape footprints (they do not depend on the input the shape came from)."""

    def __init__(self, shared: dict | None = None):
        self.peak = 0
        self._seen = {} if shared is None else shared

    def __call__(self, *args, **kwargs):
        key = str(jax.tree_util.tree_map(lambda x: getattr(x, "shape", x), (args[2:], kwargs)))
        if key not in self._seen:
            stats = run_chunk.lower(*args, **kwargs).compile().memory_analysis()
            self._seen[key] = int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes)
        self.peak = max(self.peak, self._seen[key])
