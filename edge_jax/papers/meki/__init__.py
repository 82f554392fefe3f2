"""MeKi: grids, fold-time analyses (logit lens, memory-size fit), decode benchmark."""
from edge_jax.papers.meki import bench, commands  # noqa: F401  (benchmark meki-decode, `analyze logit-lens`)
