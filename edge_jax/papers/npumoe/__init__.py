"""NPUMoE: static capacity plans, expert execution strategies, calibration, routing traces."""
from edge_jax.papers.npumoe import evaluators, setup  # noqa: F401

from edge_jax.papers.npumoe import config  # noqa: F401  (registrations)
from edge_jax.papers.npumoe import bench, commands  # noqa: F401  (benchmark moe, `moe`)
