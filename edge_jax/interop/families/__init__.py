"""The HF model families edge_jax converts, one module each (importing this package registers them)."""
from edge_jax.interop.families import deepseek_v2, llama, phimoe, qwen2, qwen3, qwen3_moe  # noqa: F401
