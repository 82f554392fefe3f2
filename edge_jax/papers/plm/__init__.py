"""PLM: grids, activation sparsity, KV-cache accounting, architecture stats, MLA decode benchmark.

Importing it registers ``train.sparsity_batches`` and its evaluator, ``edge-jax bench mla-decode``
and ``edge-jax analyze kv-cache | sparsity``; MLA and the FFN kinds live in :mod:`edge_jax.layers`."""
from edge_jax.papers.plm import bench, commands, config, evaluators  # noqa: F401  (registrations)
