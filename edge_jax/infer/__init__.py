"""Inference on one explicit KV cache (:mod:`edge_jax.infer.kv_state`): prefill and decoding
(:mod:`edge_jax.infer.decode`), the long-context KV methods (:mod:`edge_jax.infer.kv_baselines`:
``KV_METHODS`` and the generic baselines, registered on import), their harness
(:mod:`edge_jax.infer.longctx`: the ``longctx`` config section and evaluators) and slot selection
(:mod:`edge_jax.infer.kv_select`)."""
from edge_jax.infer import kv_baselines, longctx  # noqa: F401  (register the baselines, section, evaluators)
from edge_jax.infer.decode import decode_step, decode_tokens, greedy_decode, init_cache, prefill

__all__ = ["decode_step", "decode_tokens", "greedy_decode", "init_cache", "prefill"]
