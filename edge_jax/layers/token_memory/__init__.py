"""Token-indexed memories beside the transformer: MeKi, PLE, Engram (``model.memory``).

Each registers a :class:`~edge_jax.layers.token_memory.base.MemoryKind` in ``MEMORY_KINDS`` on import.
"""
from edge_jax.layers.token_memory import engram, meki, ple  # noqa: F401  (registrations)
