"""EdgeInfinite: Algorithm 1 inference, long-context evaluation, grids and reports, benchmark.

Importing it registers the ``longctx`` config section, the ``edgeinfinite`` KV method, the
long-context evaluator and ``edge-jax bench long-context``."""
from edge_jax.papers.edgeinfinite import bench, config, evaluators, inference  # noqa: F401  (registrations)
