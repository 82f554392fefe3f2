"""Importing this module registers everything EdgeInfinite adds (:func:`edge_jax.plugins.load`)."""
from edge_jax.papers.edgeinfinite import bench, cli, config, docs, inference  # noqa: F401  (registrations)
