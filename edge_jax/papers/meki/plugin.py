"""Importing this module registers everything MeKi adds (:func:`edge_jax.plugins.load`)."""
from edge_jax.papers.meki import cli, docs, params, tasks  # noqa: F401  (registrations)
