"""MeKi: grids, analyses of trained runs (logit lens, memory-size fit), decode benchmark.

Importing it registers ``edge-jax bench meki-decode``, ``edge-jax analyze logit-lens`` and the task
group ``meki10`` (:mod:`edge_jax.papers.meki.tasks`); MeKi's layer, its keys, its variants and its
fold live in :mod:`edge_jax.layers.token_memory.meki`."""
from edge_jax.papers.meki import bench, commands, tasks  # noqa: F401  (registrations)
