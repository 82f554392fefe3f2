"""Each paper's application code, one folder per paper.

Importing this package registers every paper's config sections, evaluators, benchmarks and
commands (:mod:`edge_jax.registry`); a new paper is a folder here plus one line below.
"""
from edge_jax.papers import edgeinfinite, expert_cache, meki, npumoe, plm  # noqa: F401
