"""EdgeInfinite: Algorithm 1 inference, grids and reports, benchmark.

Importing it registers its config checks, the ``edgeinfinite`` KV method and ``edge-jax bench
long-context``; the long-context harness that evaluates it is generic (:mod:`edge_jax.infer.longctx`)."""
from edge_jax.papers.edgeinfinite import bench, config, inference  # noqa: F401  (registrations)
