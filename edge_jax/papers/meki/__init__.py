"""MeKi: grids, analyses of trained runs (logit lens, memory-size fit), decode benchmark.

Importing it registers ``edge-jax bench meki-decode``, ``edge-jax analyze logit-lens``, the task
group ``meki10`` (:mod:`edge_jax.papers.meki.tasks`) and the Table 5 comparison of ``edge-jax params``
(:mod:`edge_jax.papers.meki.params`); MeKi's layer, its keys, its variants and its
fold live in :mod:`edge_jax.layers.token_memory.meki`."""
from edge_jax.papers.meki import bench, commands, params, tasks  # noqa: F401  (registrations)
