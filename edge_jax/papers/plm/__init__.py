"""PLM: grids, activation sparsity, KV-cache accounting, architecture stats, MLA decode benchmark."""
from edge_jax.papers.plm import evaluators  # noqa: F401

from edge_jax.papers.plm import config  # noqa: F401  (registrations)
from edge_jax.papers.plm import bench, commands  # noqa: F401  (mla-decode, `analyze kv-cache|sparsity`)
