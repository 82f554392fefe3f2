"""KV-cache decoding: prefill a prompt, then one token per step, with jitted, cache-donating steps.

The cache is the explicit per-layer cache of :mod:`edge_jax.infer.kv_state`, the one every inference
path uses, in its plain layout: GQA keys and values, or MLA's latent and RoPE key
(``model.mla_absorb`` picks the naive or the absorbed decode), and a validity flag per slot;
:func:`init_cache` sizes it (S slots). Every call writes its tokens in place at the next free slots,
slot ``s`` holding position ``s``, and attends over the filled ones
(:func:`edge_jax.layers.attention.cached.join_cache`); all rows of a batch advance together.

Folded MeKi can keep its tables outside the device (:func:`host_tables`): the rows of each step's
tokens are gathered on the host and passed as ``meki_rows``, which is what the paper's on-device
deployment does (MeKi §3.5: ``L x d_mem`` values per token, 14 KB for 28 layers x 256 in fp16).

Engram models are not supported: their n-gram ids and short convolution look back past the
current token, which this cache does not hold.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from edge_jax.infer.kv_state import apply_chunk, capacity, empty_caches, fill, filled
from edge_jax.models.decoder import ModelConfig


def check_supported(cfg: ModelConfig) -> None:
    if cfg.memory == "engram":
        raise ValueError("the KV-cache decoder does not support memory=engram (its n-gram ids and convolution "
                         "need past tokens); use edge_jax.models.generate.greedy_generate")


def init_cache(model, batch: int, max_len: int) -> list[dict]:
    """Empty per-layer caches for ``batch`` rows of up to ``max_len`` tokens."""
    check_supported(model.cfg)
    return empty_caches(model.cfg, batch, max_len, plain=True)


def cache_index(cache):
    """Number of filled slots (an int32 device scalar; the same in every layer)."""
    return filled(cache)


def cache_length(cache) -> int:
    """Slots per row."""
    return capacity(cache)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def forward_chunk(model, params, cache, tokens_BT, extra):
    """Write ``tokens_BT`` into the cache; logits at the last position, their argmax, the new cache."""
    B, T = tokens_BT.shape
    start = cache_index(cache)
    positions_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))
    logits_BTV, extras = apply_chunk(model, params, tokens_BT, positions_BT, cache, **extra)
    cache = [fill(c, e, start, T) for c, e in zip(cache, extras)]
    logits_BV = logits_BTV[:, -1]
    return logits_BV, jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)[:, None], cache


def prefill(model, params, cache, tokens_BT, **extra):
    """``(logits_last_BV, cache)`` after writing the prompt block ``tokens_BT`` at the cache index.
    ``extra``: ``meki_rows`` [B, T, L, d_mem] for a folded MeKi model whose tables live outside."""
    check_supported(model.cfg)
    start, T, S = int(cache_index(cache)), tokens_BT.shape[1], cache_length(cache)
    if start + T > S:
        raise ValueError(f"{T} prompt tokens at cache index {start} exceed the cache length {S}; "
                         "raise max_len in init_cache")
    logits_BV, _, cache = forward_chunk(model, params, cache, tokens_BT, extra)
    return logits_BV, cache


def decode_step(model, params, cache, token_B1, **extra):
    """``(logits_BV, cache)`` for one new token per row (not bounds-checked: checking would sync)."""
    check_supported(model.cfg)
    logits_BV, _, cache = forward_chunk(model, params, cache, token_B1, extra)
    return logits_BV, cache


def decode_tokens(model, params, cache, token_B1, steps: int, meki_rows_fn: Callable | None = None):
    """Feed ``token_B1`` and then each argmax for ``steps`` steps: ``(tokens_BN numpy, cache)``.

    Every step brings its token to the host, as a generation loop streaming its output does (and the
    host-table MeKi path must, to gather the next rows), so all variants pay the same round trip."""
    check_supported(model.cfg)
    start, S = int(cache_index(cache)), cache_length(cache)
    if start + steps > S:
        raise ValueError(f"{steps} decode steps at cache index {start} exceed the cache length {S}; "
                         "raise max_len in init_cache")
    out, host_B1 = [], np.asarray(token_B1)
    for _ in range(steps):
        extra = {} if meki_rows_fn is None else {"meki_rows": meki_rows_fn(host_B1)}
        _, token_B1, cache = forward_chunk(model, params, cache, token_B1, extra)
        host_B1 = np.asarray(token_B1)
        out.append(host_B1)
    tokens_BN = np.concatenate(out, axis=1) if out else np.zeros((host_B1.shape[0], 0), np.int32)
    return tokens_BN, cache


def greedy_decode(model, params, prompt_BT, new_tokens: int, meki_rows_fn: Callable | None = None):
    """``new_tokens`` argmax continuations [B, new_tokens] (numpy) of ``prompt_BT`` using the KV cache.
    ``meki_rows_fn(tokens_BT) -> rows [B, T, L, d_mem]``, numpy or on the device (e.g.
    ``host_tables(...).rows`` or ``.gather``)."""
    check_supported(model.cfg)
    prompt_BT = np.asarray(prompt_BT, np.int32)
    B, T = prompt_BT.shape
    if new_tokens <= 0:
        return np.zeros((B, 0), np.int32)
    cache = init_cache(model, B, T + new_tokens)
    extra = {} if meki_rows_fn is None else {"meki_rows": meki_rows_fn(prompt_BT)}
    _, first_B1, cache = forward_chunk(model, params, cache, jnp.asarray(prompt_BT), extra)
    rest_BN, _ = decode_tokens(model, params, cache, first_B1, new_tokens - 1, meki_rows_fn)
    return np.concatenate([np.asarray(first_B1), rest_BN], axis=1)


class HostTables(NamedTuple):
    """Folded MeKi with its tables outside the device (see :func:`host_tables`)."""
    params: dict              # the folded params without ``layers_i/meki/table``
    table_VLM: object         # [V, L, d_mem] in pinned host memory, or a numpy array
    gather: Callable          # tokens [B, T] -> rows [B, T, L, d_mem] on the device (jax.device_put)
    rows: Callable            # tokens [B, T] -> rows [B, T, L, d_mem] as numpy (the host gather alone)
    bytes_per_token: int      # L * d_mem * itemsize moved from the table per token


def host_tables(params, cfg: ModelConfig) -> HostTables:
    """Split the tables off a folded MeKi param tree and stack them [V, L, d_mem] in host memory.

    The stack goes to ``memory_kind="pinned_host"`` when the device offers it (GPUs/TPUs; the CPU
    lists it too, but there it is the same RAM, a no-op) and stays a numpy array otherwise. The
    gather is numpy fancy indexing on a host view of that table (taken once: zero-copy on CPU, a
    second host copy on accelerators) followed by ``device_put`` of the [B, T, L, d_mem] rows.

    In a decode loop pass ``rows`` (numpy) as ``meki_rows_fn``: the jitted step copies a numpy
    argument to the device itself, the same bytes as ``gather`` but about 0.2 ms less Python overhead
    per step than a separate ``jax.device_put`` call (measured on CPU, where a tiny model's step
    takes 0.2 ms).
    """
    if not (cfg.memory == "meki" and cfg.meki_folded):
        raise ValueError("host_tables needs a folded MeKi model (model.memory=meki, meki_folded=True); "
                         "fold it with edge_jax.models.fold.fold_meki first")
    params = nn.unbox(params)
    names = [f"layers_{i}" for i in range(cfg.n_layers)]
    table_VLM = np.stack([np.asarray(params[n]["meki"]["table"]) for n in names], axis=1)
    stripped = dict(params)
    for n in names:
        stripped[n] = {**params[n], "meki": {k: v for k, v in params[n]["meki"].items() if k != "table"}}
    dev = next(iter(jax.tree_util.tree_leaves(params)[0].devices()))
    if "pinned_host" in {m.kind for m in dev.addressable_memories()}:
        table = jax.device_put(table_VLM, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        view_VLM = np.asarray(table)
    else:
        table = view_VLM = table_VLM

    def rows(tokens_BT):
        return view_VLM[np.asarray(tokens_BT)]

    def gather(tokens_BT):
        return jax.device_put(rows(tokens_BT), dev)

    return HostTables(stripped, table, gather, rows, cfg.n_layers * cfg.d_mem * table_VLM.dtype.itemsize)
