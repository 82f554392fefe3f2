"""Importing this module registers everything NPUMoE adds (:func:`edge_jax.plugins.load`)."""
from edge_jax.papers.npumoe import cli, config, docs, evaluators, kernel_cases, setup  # noqa: F401  (registrations)
