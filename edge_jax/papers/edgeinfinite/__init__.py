"""EdgeInfinite: Algorithm 1 inference, grids and reports, benchmark.

Its registrations (:mod:`.plugin`): its config checks, the ``edgeinfinite`` KV method, the segment
attention cases of ``edge-jax bench kernels``; ``edge-jax bench long-context`` is declared in :mod:`.cli`.
The long-context harness that evaluates it is generic (:mod:`edge_jax.infer.longctx`)."""
