"""Attention of a chunk over an explicit per-layer KV cache: the one attend-over-cache path.

Every attention kind caches per token what its keys and values are made from, in fixed-capacity
buffers with a validity flag per slot (the layouts: :mod:`edge_jax.infer.kv_state`): GQA keys and
values [B, S, G, K]; MLA's latent ``c_kv`` [B, S, d_c] and shared RoPE key ``k_rope`` [B, S, d_rope],
one group. :func:`join_cache` puts a chunk of T tokens at ``positions_BT`` beside the cache's S slots
and builds the mask over the joined keys: every valid slot, and the chunk causally. The attention kind then runs
its own softmax core over the joined arrays. Where the chunk goes depends on the cache:

* a cache with ``pos`` [B, G, S] (a position per slot and KV group) holds keys before RoPE, read at
  ``pos``, so a policy may re-assign positions (StreamingLLM, EdgeInfinite) or keep other tokens for
  each KV head (SnapKV). The chunk is appended after its S slots (mask [B, G, T, S + T]); the caller writes the
  chunk's arrays where its policy wants them.
* a plain cache (no ``pos``) holds the token at position p in slot p, keys after RoPE: the chunk is
  written in place at its positions (mask [B, G, T, S]) and the joined arrays are the updated cache. Decoding
  thus pays neither RoPE over the cache nor a copy of it.

:func:`context_attention` is GQA's use of it, with EdgeInfinite's memory as an option;
:class:`edge_jax.layers.attention.mla.MLAttention` uses it for the latent cache. :func:`cache_votes` turns the
attention probabilities into SnapKV's votes. ``*_reference`` functions are loop versions.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.attention.dot import dot_product_attention, dot_product_attention_reference
from edge_jax.layers.infini.compressive import (
    memory_readout,
    memory_readout_reference,
    memory_update,
    memory_update_reference,
)
from edge_jax.layers.rope import Rope


def rope_per_group(x_BSGK, positions_BGS, rope: Rope, long=None):
    """RoPE on cached keys whose slots have their own position in every group (``long``: LongRoPE's
    switch, that of the chunk the keys are read for)."""
    rotate = jax.vmap(lambda x_BSK, p_BS: rope.apply(x_BSK[:, :, None], p_BS, long)[:, :, 0],
                      in_axes=(2, 1), out_axes=2)
    return rotate(x_BSGK, positions_BGS)


def cache_mask(valid_BGS, T: int):
    """[B, G, T, S + T]: every valid cache slot, then the chunk causally."""
    B, G, S = valid_BGS.shape
    prefix = jnp.broadcast_to(valid_BGS[:, :, None, :], (B, G, T, S))
    own = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, G, T, T))
    return jnp.concatenate([prefix, own], axis=-1)


def _rope(x, positions, rope: Rope, long, per_group: bool = False):
    """RoPE on [B, S, G, K] or (no group axis, MLA) [B, S, K] at [B, S] or (``per_group``) [B, G, S]
    (a chunk's arrays: T for S)."""
    if x.ndim == 3:
        return _rope(x[:, :, None], positions, rope, long, per_group)[:, :, 0]
    return rope_per_group(x, positions, rope, long) if per_group else rope.apply(x, positions, long)


def join_cache(ctx: dict, new: dict, positions_BT, rope: Rope, rotate: str):
    """``(joined, mask_BGTS, stored)`` for a chunk whose per-token arrays ``new`` ([B, T, ...], before
    RoPE) go beside the cache arrays of the same names in ``ctx``; the one named ``rotate`` goes
    through RoPE (the chunk at ``positions_BT``; a cache with ``pos`` at its slots' positions).
    ``joined``: the arrays attention reads, in ``new``'s dtype (plain cache: the cache's); ``stored``:
    what the cache keeps of this chunk, under the same names: the chunk's arrays before RoPE (cache
    with ``pos``: the caller writes them) or the whole updated buffers (plain cache). LongRoPE picks its
    factors from the chunk's positions, for the cached keys too."""
    T = positions_BT.shape[1]
    long = rope.is_long(positions_BT)
    if "pos" in ctx:  # append after the cache's slots
        joined = {}
        for name, x in new.items():
            cached = ctx[name]
            if name == rotate:
                x = _rope(x, positions_BT, rope, long)
                cached = _rope(cached, ctx["pos"], rope, long, per_group=True)
            joined[name] = jnp.concatenate([cached.astype(x.dtype), x], axis=1)
        return joined, cache_mask(ctx["valid"], T), new
    start = positions_BT[0, 0]  # plain cache: slot = position, every row alike
    joined = {}
    for name, x in new.items():
        buf = ctx[name]
        x = _rope(x, positions_BT, rope, long) if name == rotate else x
        joined[name] = jax.lax.dynamic_update_slice(buf, x.astype(buf.dtype), (0, start) + (0,) * (buf.ndim - 2))
    slot_S = jnp.arange(ctx["valid"].shape[-1])
    mask = ((ctx["valid"][:, :, None, :] & (slot_S < start))
            | ((slot_S >= start) & (slot_S <= positions_BT[:, None, :, None])))
    return joined, mask, joined


def _rotate_reference(vec_K, position, rope: Rope, long: bool):
    """RoPE of one vector at one position (rotate-half), in float32 numpy."""
    half = vec_K.shape[-1] // 2
    angles = position * np.asarray(rope.inv_freq(vec_K.shape[-1], long))
    cos, sin = np.cos(angles) * rope.cos_sin_factor, np.sin(angles) * rope.cos_sin_factor
    x1, x2 = vec_K[:half].astype(np.float32), vec_K[half:].astype(np.float32)
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin])


def join_cache_reference(ctx: dict, new: dict, positions_BT, rope: Rope, rotate: str):
    """:func:`join_cache` slot by slot: every key rotated alone at its position, each chunk token
    placed and the mask written out entry by entry."""
    positions = np.asarray(positions_BT)
    valid = np.asarray(ctx["valid"])
    B, T = positions.shape
    G, S = valid.shape[1:]
    appended = "pos" in ctx
    long = bool(rope.long_factor) and positions.max() + 1 > rope.original_max_len
    S_joined = S + T if appended else S
    slot_BT = np.broadcast_to(S + np.arange(T), (B, T)) if appended else positions
    joined = {}
    for name, x in new.items():
        dtype = x.dtype if appended else ctx[name].dtype
        cached = np.asarray(jnp.asarray(ctx[name], dtype).astype(jnp.float32))
        x = np.asarray(jnp.asarray(x, jnp.float32))
        out = np.zeros((B, S_joined) + cached.shape[2:], np.float32)
        for b in range(B):
            for s in range(S):
                out[b, s] = cached[b, s]
                if name == rotate and appended:
                    for g in range(G):
                        at = (b, s, g) if cached.ndim == 4 else (b, s)
                        out[at] = _rotate_reference(cached[at], ctx["pos"][b, g, s], rope, long)
            for t in range(T):
                out[b, slot_BT[b, t]] = x[b, t]
                if name == rotate:
                    for g in range(x.shape[2] if x.ndim == 4 else 1):
                        at = (b, slot_BT[b, t], g) if x.ndim == 4 else (b, slot_BT[b, t])
                        vec = x[(b, t, g) if x.ndim == 4 else (b, t)]
                        out[at] = _rotate_reference(vec, positions[b, t], rope, long)
        # rounded to the dtype as the fast path does (RoPE computes in float32)
        joined[name] = jnp.asarray(out, dtype)
    mask = np.zeros((B, G, T, S_joined), bool)
    for b in range(B):
        for g in range(G):
            for t in range(T):
                for s in range(S_joined):
                    in_chunk = s in slot_BT[b] and list(slot_BT[b]).index(s) <= t
                    before = s < S and valid[b, g, s] and (appended or s < slot_BT[b, 0])
                    mask[b, g, t, s] = in_chunk or before
    return joined, jnp.asarray(mask), new if appended else joined


def cache_votes(probs_BGQTS, groups: int, window: int, end):
    """SnapKV's votes [B, groups, S]: the attention of the ``window`` queries before ``end``, summed
    over them and over the query heads of each cache group (``probs`` has G attention groups of Q
    query heads each; G is a multiple of ``groups``: MLA attends with one group per head, caches one)."""
    B, G, _, T, S = probs_BGQTS.shape
    rows_T = ((jnp.arange(T) >= end - window) & (jnp.arange(T) < end)).astype(probs_BGQTS.dtype)
    votes = jnp.einsum("bgqts,t->bgs", probs_BGQTS, rows_T)
    return votes if groups == G else votes.reshape(B, groups, G // groups, S).sum(axis=2)


def context_attention(q_BTHK, k_BTGK, v_BTGK, positions_BT, ctx: dict, rope: Rope, spec, gate):
    """GQA over a cache: ``(attention [B, T, H, K], extras)`` for a chunk at ``positions_BT``.

    ``ctx``: the layer's cache (``k`` / ``v`` [B, S, G, K], ``valid``, optional ``pos``; see
    :func:`join_cache`); optional ``M`` [B, G, K, K], ``z`` [B, G, K] and ``has_memory`` (bool) for
    EdgeInfinite (``spec``: its :class:`edge_jax.layers.infini.spec.InfiniSpec`, ``gate`` its
    memory gate); ``votes`` (static int w > 0) adds the attention of the w queries before
    ``votes_end`` (default T) to every key, summed over them and over each group's query heads
    ([B, G, S], SnapKV's votes); ``compress`` (static bool) folds this chunk's keys (after RoPE) into
    the memory, with ``compress_valid`` [B, T]. ``extras`` always has ``k`` and ``v``, what the
    cache keeps (:func:`join_cache`'s ``stored``); ``votes``, ``M`` / ``z`` on request.
    """
    T = q_BTHK.shape[1]
    q = rope.apply(q_BTHK, positions_BT)
    joined, mask, stored = join_cache(ctx, {"k": k_BTGK, "v": v_BTGK}, positions_BT, rope, rotate="k")
    window = int(ctx.get("votes", 0))
    extras = dict(stored)
    if window:
        out, probs = dot_product_attention(q, joined["k"], joined["v"], mask, return_probs=True)
        extras["votes"] = cache_votes(probs, joined["k"].shape[2], window, ctx.get("votes_end", T))
    else:
        out = dot_product_attention(q, joined["k"], joined["v"], mask)
    if "M" in ctx:
        if gate is None:
            raise ValueError("a memory was passed to an attention layer without a memory gate (model.infini_hidden=0)")
        out = gate(memory_readout(q, ctx["M"], ctx["z"], spec.eps), out, ctx["has_memory"])
        if ctx.get("compress"):
            extras["M"], extras["z"] = memory_update(ctx["M"], ctx["z"], rope.apply(k_BTGK, positions_BT),
                                                     v_BTGK, ctx.get("compress_valid"), rule=spec.update, eps=spec.eps)
    return out, extras


def context_attention_reference(q_BTHK, k_BTGK, v_BTGK, positions_BT, ctx: dict, rope: Rope, spec, gate):
    """:func:`context_attention` from the loop versions of its parts (cache join, softmax, votes,
    memory)."""
    T = q_BTHK.shape[1]
    q = rope.apply(q_BTHK, positions_BT)
    joined, mask, stored = join_cache_reference(ctx, {"k": k_BTGK, "v": v_BTGK}, positions_BT, rope, rotate="k")
    out, probs = dot_product_attention_reference(q, joined["k"], joined["v"], mask, return_probs=True)
    extras = dict(stored)
    window = int(ctx.get("votes", 0))
    if window:
        probs, end = np.asarray(probs), int(ctx.get("votes_end", T))
        votes = np.zeros(probs.shape[:2] + probs.shape[-1:], np.float32)
        for t in range(max(end - window, 0), end):
            votes += probs[:, :, :, t].sum(axis=2)
        extras["votes"] = jnp.asarray(votes)
    if "M" in ctx:
        out = gate(memory_readout_reference(q, ctx["M"], ctx["z"], spec.eps), out, ctx["has_memory"])
        if ctx.get("compress"):
            extras["M"], extras["z"] = memory_update_reference(ctx["M"], ctx["z"], rope.apply(k_BTGK, positions_BT),
                                                               v_BTGK, ctx.get("compress_valid"), rule=spec.update,
                                                               eps=spec.eps)
    return out, extras
