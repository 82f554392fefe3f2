"""Importing this module registers everything PLM adds (:func:`edge_jax.plugins.load`)."""
from edge_jax.papers.plm import bench, cli, config, docs, evaluators, params  # noqa: F401  (registrations)
