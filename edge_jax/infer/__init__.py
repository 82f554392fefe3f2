"""Inference on one explicit KV cache (:mod:`edge_jax.infer.kv_state`): prefill and decoding
(:mod:`edge_jax.infer.decode`), the long-context KV methods (:mod:`edge_jax.infer.kv_methods`; the
generic baselines of :mod:`edge_jax.infer.kv_baselines` register on import) and slot selection
(:mod:`edge_jax.infer.kv_select`)."""
from edge_jax.infer import kv_baselines  # noqa: F401  (registers fullkv, snapkv, pyramidkv, streamingllm)
from edge_jax.infer.decode import (
    HostTables,
    decode_step,
    decode_tokens,
    greedy_decode,
    host_tables,
    init_cache,
    prefill,
)

__all__ = ["HostTables", "decode_step", "decode_tokens", "greedy_decode", "host_tables", "init_cache", "prefill"]
