"""edge_jax: JAX/Flax reimplementation of edge-LLM research systems."""

__version__ = "0.1.0"
