"""MeKi: grids, analyses of trained runs (logit lens, memory-size fit), decode benchmark.

Importing it registers ``edge-jax bench meki-decode`` and ``edge-jax analyze logit-lens``; MeKi's
layer, its keys and its variants live in :mod:`edge_jax.layers.token_memory.meki`."""
from edge_jax.papers.meki import bench, commands  # noqa: F401  (registrations)
