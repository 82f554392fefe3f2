"""The explicit KV cache, the one cache form of every attention kind, and the jitted chunk step that
inference is built on.

A layer's cache is a dict of fixed-capacity buffers (static shapes, so one compile serves a run)::

    GQA    k, v     [B, S, G, K]   keys, values
    MLA    c_kv     [B, S, d_c]    the latent (PLM eq. 8)
           k_rope   [B, S, d_rope] the RoPE key shared by the heads
    all    valid    [B, G, S]      the slots that hold a token (G = 1 for MLA and plain caches)
           pos      [B, G, S]      the RoPE position each slot is read at (policy caches only)

A policy cache (with ``pos``) keeps keys before RoPE, so a policy may re-assign positions inside it
(StreamingLLM, EdgeInfinite), and a position and flag per KV group, so it may keep other tokens for
each head (SnapKV); a chunk attends after its slots and the caller writes the chunk where it wants
(:func:`write`). A plain cache (no ``pos``) holds the token at position p in slot p with its key
after RoPE; a chunk is written in place at its positions (:func:`fill`): plain decoding
(:mod:`edge_jax.infer.decode`). How a chunk attends over either:
:func:`edge_jax.layers.attention.cached.join_cache`. EdgeInfinite adds a memory per layer beside the
cache: ``M`` [B, G, K, K] and ``z`` [B, G, K] (float32).

:func:`apply_chunk` runs one chunk of tokens through the model (``DecoderLM``'s ``attn_context``) and
returns per layer what the cache keeps (under the cache's names) and, on request, SnapKV votes or the
updated memory. :func:`run_chunk` is the jitted step of the long-context sessions
(:mod:`edge_jax.infer.kv_baselines`, EdgeInfinite's Algorithm 1).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from edge_jax.infer.kv_select import gather_kv, gather_per_group

SLOT_ARRAYS = ("pos", "valid")  # per slot and group; every other array of a cache is per token


def empty_cache(batch: int, capacity: int, groups: int, head_dim: int, dtype=jnp.float32,
                plain: bool = False) -> dict:
    """A GQA layer's empty cache: a policy cache, or a ``plain`` one."""
    cache = {"k": jnp.zeros((batch, capacity, groups, head_dim), dtype),
             "v": jnp.zeros((batch, capacity, groups, head_dim), dtype)}
    return _slots(cache, batch, 1 if plain else groups, capacity, plain)


def empty_latent_cache(batch: int, capacity: int, kv_lora_rank: int, d_rope: int, dtype=jnp.float32,
                       plain: bool = False) -> dict:
    """An MLA layer's empty cache: the latent and the RoPE key, one group."""
    cache = {"c_kv": jnp.zeros((batch, capacity, kv_lora_rank), dtype),
             "k_rope": jnp.zeros((batch, capacity, d_rope), dtype)}
    return _slots(cache, batch, 1, capacity, plain)


def _slots(cache: dict, batch: int, groups: int, capacity: int, plain: bool) -> dict:
    cache["valid"] = jnp.zeros((batch, groups, capacity), bool)
    if not plain:
        cache["pos"] = jnp.zeros((batch, groups, capacity), jnp.int32)
    return cache


def empty_caches(cfg, batch: int, capacity, plain: bool = False) -> list[dict]:
    """One empty cache per layer of ``cfg``'s attention kind; ``capacity`` is an int or one int per
    layer (PyramidKV); ``plain``: plain caches (decoding) instead of policy caches."""
    caps = capacity if isinstance(capacity, (list, tuple)) else [capacity] * cfg.n_layers
    dtype = jnp.dtype(cfg.dtype)
    if cfg.attention == "mla":
        return [empty_latent_cache(batch, c, cfg.kv_lora_rank, cfg.d_rope, dtype, plain) for c in caps]
    return [empty_cache(batch, c, cfg.n_kv_heads, cfg.head_dim, dtype, plain) for c in caps]


def value_arrays(cache: dict) -> dict:
    """The per-token arrays of a layer's cache (what a token costs: GQA ``k``, ``v``; MLA ``c_kv``,
    ``k_rope``), without the per-slot ``pos`` / ``valid``."""
    return {name: a for name, a in cache.items() if name not in SLOT_ARRAYS}


def cache_bytes(caches: list[dict], memory: list[dict] | None = None) -> int:
    """Bytes held by the cache buffers (positions and flags included) and memories."""
    arrays = jax.tree_util.tree_leaves(caches) + jax.tree_util.tree_leaves(memory or [])
    return int(sum(a.size * a.dtype.itemsize for a in arrays))


def filled(caches: list[dict]):
    """Slots in use (int32 device scalar) of caches filled from slot 0 on, all rows alike (decoding)."""
    return jnp.sum(caches[0]["valid"][0, 0], dtype=jnp.int32)


def capacity(caches: list[dict]) -> int:
    """Slots per row of the first layer's cache."""
    return caches[0]["valid"].shape[-1]


def fill(cache: dict, stored: dict, start, count) -> dict:
    """A plain cache after a chunk of ``count`` tokens at positions ``start ..``: the layer's updated
    buffers (``stored``, :func:`apply_chunk`'s extras) and those slots marked filled."""
    slot_S = jnp.arange(cache["valid"].shape[-1])
    return dict({name: stored[name] for name in value_arrays(cache)},
                valid=cache["valid"] | ((slot_S >= start) & (slot_S < start + count)))


@jax.jit
def _write(cache: dict, new: dict, pos_BT, start, count):
    B, T = pos_BT.shape
    G, S = cache["pos"].shape[1:]
    zero = jnp.zeros((), jnp.int32)
    real_BT = jnp.broadcast_to(jnp.arange(T) < count, (B, T))
    # padding rows must not overwrite real slots: keep the old contents where a row is padding
    slot_T = jnp.clip(start + jnp.arange(T), 0, S - 1)
    out = {}
    for name, buf in value_arrays(cache).items():
        x = new[name]
        x = jnp.where(real_BT.reshape(B, T, *([1] * (x.ndim - 2))), x, buf[:, slot_T].astype(x.dtype))
        out[name] = jax.lax.dynamic_update_slice(buf, x.astype(buf.dtype), (zero, start) + (zero,) * (buf.ndim - 2))
    pos_new = jnp.where(real_BT[:, None], jnp.broadcast_to(pos_BT[:, None], (B, G, T)), cache["pos"][:, :, slot_T])
    valid_new = real_BT[:, None] | cache["valid"][:, :, slot_T]
    out["pos"] = jax.lax.dynamic_update_slice(cache["pos"], pos_new.astype(jnp.int32), (zero, zero, start))
    out["valid"] = jax.lax.dynamic_update_slice(cache["valid"], jnp.broadcast_to(valid_new, (B, G, T)),
                                                (zero, zero, start))
    return out


def write(cache: dict, new: dict, pos_BT, start, count) -> dict:
    """Write the first ``count`` of T new tokens into a policy cache at slots ``start ..`` (the rest
    of T is padding). ``new``: the chunk's per-token arrays [B, T, ...] under the cache's names (e.g.
    a layer's :func:`apply_chunk` extras; other entries are ignored); ``pos_BT`` their positions."""
    if "pos" not in cache:
        raise ValueError("write places a chunk in a policy cache (with pos); a plain cache is updated by fill")
    return _write(cache, {name: new[name] for name in value_arrays(cache)}, pos_BT, start, count)


def only_first(cache: dict, count: int) -> dict:
    """The cache with every slot from ``count`` on marked empty (EdgeInfinite keeps the sink)."""
    keep = jnp.arange(cache["valid"].shape[-1]) < count
    return dict(cache, valid=cache["valid"] & keep)


def first_slots(cache: dict, count: int) -> dict:
    """The cache cut to its first ``count`` slots."""
    return {name: a[..., :count] if name in SLOT_ARRAYS else a[:, :count] for name, a in cache.items()}


def take_slots(cache: dict, idx_BGP) -> dict:
    """The policy cache's slots ``idx_BGP`` [B, G, P] of each group, in that order (P slots)."""
    out = {}
    for name, a in cache.items():
        if name in SLOT_ARRAYS:
            out[name] = gather_per_group(a, idx_BGP)
        elif a.ndim == 3:  # no group axis (MLA, one group)
            out[name] = gather_kv(a[:, :, None], idx_BGP)[:, :, 0]
        else:
            out[name] = gather_kv(a, idx_BGP)
    return out


def pad_slots(cache: dict, extra: int) -> dict:
    """The cache with ``extra`` empty slots after its own (room for generated tokens)."""
    def pad(a, axis):
        return jnp.concatenate([a, jnp.zeros(a.shape[:axis] + (extra,) + a.shape[axis + 1:], a.dtype)], axis=axis)
    return {name: pad(a, 2 if name in SLOT_ARRAYS else 1) for name, a in cache.items()}


def apply_chunk(model, params, tokens_BT, positions_BT, contexts: list[dict], **inputs):
    """``(logits [B, T, V], per-layer extras)`` of one chunk after the layers' caches ``contexts``
    (each a cache, optionally with EdgeInfinite's memory and requests: see
    :func:`edge_jax.layers.attention.cached.context_attention`). ``inputs`` go to the model as they
    are (e.g. ``host_inputs``, a memory kind's inputs). Not jitted: call it inside a jitted step."""
    logits, state = model.apply({"params": params}, tokens_BT, positions_BT, attn_context=contexts,
                                mutable=["intermediates"], **inputs)
    inter = state["intermediates"]
    return logits, [{name: value[0] for name, value in inter[f"layers_{i}"]["attn"].items()}
                    for i in range(len(contexts))]


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
    return apply_chunk(model, params, tokens_BT, positions_BT, contexts)


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
