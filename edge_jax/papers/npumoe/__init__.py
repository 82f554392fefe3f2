"""NPUMoE: calibration and capacity plans, the dispatching runtime, grids, benchmark.

Importing it registers the capacity-plan config keys, the calibration and model hooks, the MoE
evaluator, ``edge-jax moe`` and ``edge-jax bench moe``; the MoE layer and its execution strategies
live in :mod:`edge_jax.layers.moe`."""
from edge_jax.papers.npumoe import bench, commands, config, evaluators, setup  # noqa: F401  (registrations)
