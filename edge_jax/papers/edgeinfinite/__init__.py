"""EdgeInfinite: Algorithm 1 inference, long-context evaluation, grids and reports, benchmark."""
from edge_jax.papers.edgeinfinite import evaluators  # noqa: F401

from edge_jax.papers.edgeinfinite import config  # noqa: F401  (registrations)
from edge_jax.papers.edgeinfinite import bench  # noqa: F401  (benchmark long-context)
