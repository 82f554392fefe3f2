"""Inference: KV-cache decoding (:mod:`edge_jax.infer.decode`)."""
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
