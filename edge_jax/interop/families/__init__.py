"""The HF model families edge_jax converts, one module each (importing this package registers them)."""
from edge_jax.interop.families import llama, qwen3  # noqa: F401
