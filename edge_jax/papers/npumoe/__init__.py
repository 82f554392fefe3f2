"""NPUMoE: calibration and capacity plans, the dispatching runtime, grids, benchmark.

Importing it registers the capacity-plan config keys, the calibration and model hooks, the MoE
evaluator, ``edge-jax moe``, ``edge-jax bench moe`` and the ``expert_ffn`` cases of ``edge-jax bench
kernels``; the MoE layer and its execution strategies live in :mod:`edge_jax.layers.moe`."""
from edge_jax.papers.npumoe import (  # noqa: F401  (registrations)
    bench,
    commands,
    config,
    evaluators,
    kernel_cases,
    setup,
)
