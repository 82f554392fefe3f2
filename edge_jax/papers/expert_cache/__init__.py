"""Two-tier MoE expert cache: simulator, predictors, policies.

Its registrations (:mod:`.plugin`): the policies, in the order the reports list them (CACHE_POLICIES), then
the task's config and runner; ``edge-jax cache`` and ``edge-jax bench cache-sim`` are declared in :mod:`.cli`."""
