"""Long-context inference methods (``longctx.method``): a registry of KV-cache policies.

A method is a session class registered under its name where it is defined (the generic baselines in
:mod:`edge_jax.infer.kv_baselines`, a paper's own method in its package, e.g. EdgeInfinite's
Algorithm 1)::

    @KV_METHODS.register("fullkv")
    class FullKVSession(CacheSession): ...

A class has ``label`` (its name in reports), ``validate(config, budget)`` (a one-line ConfigError
for a config it cannot run), ``from_config(model, params, config, budget) -> session``, where
``budget`` is the KV slots per layer the caller resolved from the config; a session has
``prefill(tokens_BT)`` and ``step(token_B1)`` returning the last logits [B, V], its per-layer
caches as ``caches`` and an optional ``probe`` (:class:`edge_jax.infer.kv_state.PeakProbe`).
Importing :mod:`edge_jax.infer` registers the generic baselines; reading the registry imports the
papers (:func:`edge_jax.registry.load_plugins`), which register theirs.
"""
from __future__ import annotations

from edge_jax.registry import Registry

KV_METHODS: Registry = Registry("KV method", key="longctx.method")
