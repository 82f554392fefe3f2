"""KV-cache decoding: prefill a prompt, then one token per step, with jitted, cache-donating steps.

The cache is the explicit per-layer cache of :mod:`edge_jax.infer.kv_state`, the one every inference
path uses, in its plain layout: GQA keys and values, or MLA's latent and RoPE key
(``model.mla_absorb`` picks the naive or the absorbed decode), and a validity flag per slot;
:func:`init_cache` sizes it (S slots). Every call writes its tokens in place at the next free slots,
slot ``s`` holding position ``s``, and attends over the filled ones
(:func:`edge_jax.layers.attention.cached.join_cache`); all rows of a batch advance together.

A model with host inputs (:mod:`edge_jax.models.inputs`) gets them for each chunk's tokens from
``host_fn(tokens_BT) -> {name: array}`` (e.g. rows of a memory table kept in host memory, gathered
for the step's tokens). A memory kind whose ``decode_blocker`` gives a reason (e.g. inputs that look
back past the current token, which this cache does not hold) is refused by :func:`check_supported`.
"""
from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.infer.kv_state import apply_chunk, capacity, empty_caches, fill, filled
from edge_jax.layers.token_memory.base import MEMORY_KINDS
from edge_jax.models.decoder import ModelConfig
from edge_jax.models.inputs import apply_kwargs


def check_supported(cfg: ModelConfig) -> None:
    """A one-line ValueError when the model's memory kind cannot be decoded with the KV cache."""
    blocker = MEMORY_KINDS.get(cfg.memory).decode_blocker
    reason = blocker(cfg) if blocker is not None else None
    if reason:
        raise ValueError(f"the KV-cache decoder does not support model.memory={cfg.memory!r}: {reason}; "
                         "use edge_jax.models.generate.greedy_generate")


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
def forward_chunk(model, params, cache, tokens_BT, host):
    """Write ``tokens_BT`` into the cache; logits at the last position, their argmax, the new cache.
    ``host``: the model's host inputs for these tokens (``{}`` for none)."""
    B, T = tokens_BT.shape
    start = cache_index(cache)
    positions_BT = jnp.broadcast_to(start + jnp.arange(T, dtype=jnp.int32), (B, T))
    logits_BTV, extras = apply_chunk(model, params, tokens_BT, positions_BT, cache, **apply_kwargs(host))
    cache = [fill(c, e, start, T) for c, e in zip(cache, extras)]
    logits_BV = logits_BTV[:, -1]
    return logits_BV, jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)[:, None], cache


def prefill(model, params, cache, tokens_BT, host_inputs: dict | None = None):
    """``(logits_last_BV, cache)`` after writing the prompt block ``tokens_BT`` at the cache index;
    ``host_inputs``: the model's host inputs for these tokens."""
    check_supported(model.cfg)
    start, T, S = int(cache_index(cache)), tokens_BT.shape[1], cache_length(cache)
    if start + T > S:
        raise ValueError(f"{T} prompt tokens at cache index {start} exceed the cache length {S}; "
                         "raise max_len in init_cache")
    logits_BV, _, cache = forward_chunk(model, params, cache, tokens_BT, dict(host_inputs or {}))
    return logits_BV, cache


def decode_step(model, params, cache, token_B1, host_inputs: dict | None = None):
    """``(logits_BV, cache)`` for one new token per row (not bounds-checked: checking would sync)."""
    check_supported(model.cfg)
    logits_BV, _, cache = forward_chunk(model, params, cache, token_B1, dict(host_inputs or {}))
    return logits_BV, cache


def decode_tokens(model, params, cache, token_B1, steps: int, host_fn: Callable | None = None):
    """Feed ``token_B1`` and then each argmax for ``steps`` steps: ``(tokens_BT numpy, cache)``;
    ``host_fn(tokens_B1) -> dict``: the host inputs of each step's tokens.

    Every step brings its token to the host, as a generation loop streaming its output does (and a
    ``host_fn`` must, to compute the next inputs), so all variants pay the same round trip."""
    check_supported(model.cfg)
    start, S = int(cache_index(cache)), cache_length(cache)
    if start + steps > S:
        raise ValueError(f"{steps} decode steps at cache index {start} exceed the cache length {S}; "
                         "raise max_len in init_cache")
    out, host_B1 = [], np.asarray(token_B1)
    for _ in range(steps):
        host = {} if host_fn is None else host_fn(host_B1)
        _, token_B1, cache = forward_chunk(model, params, cache, token_B1, host)
        host_B1 = np.asarray(token_B1)
        out.append(host_B1)
    tokens_BT = np.concatenate(out, axis=1) if out else np.zeros((host_B1.shape[0], 0), np.int32)
    return tokens_BT, cache


def greedy_decode(model, params, prompt_BT, new_tokens: int, host_fn: Callable | None = None):
    """``new_tokens`` argmax continuations [B, new_tokens] (numpy) of ``prompt_BT`` using the KV cache.
    ``host_fn(tokens_BT) -> {name: array}``: the model's host inputs for those tokens, numpy or on the
    device (e.g. :func:`edge_jax.models.inputs.host_inputs` bound to the config, or rows gathered from
    tables kept in host memory)."""
    check_supported(model.cfg)
    prompt_BT = np.asarray(prompt_BT, np.int32)
    B, T = prompt_BT.shape
    if new_tokens <= 0:
        return np.zeros((B, 0), np.int32)
    cache = init_cache(model, B, T + new_tokens)
    host = {} if host_fn is None else host_fn(prompt_BT)
    _, first_B1, cache = forward_chunk(model, params, cache, jnp.asarray(prompt_BT), host)
    rest_BN, _ = decode_tokens(model, params, cache, first_B1, new_tokens - 1, host_fn)
    return np.concatenate([np.asarray(first_B1), rest_BN], axis=1)

