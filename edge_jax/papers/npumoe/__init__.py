"""NPUMoE: calibration and capacity plans, the dispatching runtime, grids, benchmark.

Its registrations (:mod:`.plugin`): the capacity-plan config keys, the calibration and model hooks, the MoE
evaluator and the ``expert_ffn`` cases of ``edge-jax bench kernels``; ``edge-jax moe`` and ``edge-jax bench
moe`` are declared in :mod:`.cli`. The MoE layer and its execution strategies live in :mod:`edge_jax.layers.moe`."""
