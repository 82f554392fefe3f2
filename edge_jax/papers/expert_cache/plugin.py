"""Importing this module registers everything the expert cache adds (:func:`edge_jax.plugins.load`): the
policies first, in the order the reports list them (CACHE_POLICIES), then the task's config and runner."""
# isort: off
from edge_jax.papers.expert_cache import policies  # noqa: F401  fifo, lru, lfu
from edge_jax.papers.expert_cache import watermark  # noqa: F401  ewma, scoutgate, watermark
from edge_jax.papers.expert_cache import watermark_pop  # noqa: F401  watermark_pop
from edge_jax.papers.expert_cache import belady  # noqa: F401  the offline bound
# isort: on
from edge_jax.papers.expert_cache import cli, config, docs, experiment  # noqa: F401
