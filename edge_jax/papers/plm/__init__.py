"""PLM: grids, activation sparsity, KV-cache accounting, architecture stats, MLA decode benchmark.

Importing it registers ``train.sparsity_batches`` and its evaluator, ``edge-jax bench mla-decode``,
``edge-jax analyze kv-cache | sparsity`` and the Table 1 comparison of ``edge-jax params``; MLA and
the FFN kinds live in :mod:`edge_jax.layers`."""
from edge_jax.papers.plm import bench, commands, config, evaluators, params  # noqa: F401  (registrations)
