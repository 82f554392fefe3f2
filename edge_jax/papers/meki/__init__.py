"""MeKi: grids, analyses of trained runs (logit lens, memory-size fit), decode benchmark.

Its registrations (:mod:`.plugin`): the task group ``meki10`` (:mod:`edge_jax.papers.meki.tasks`) and the
Table 5 comparison of ``edge-jax params`` (:mod:`edge_jax.papers.meki.params`); ``edge-jax bench meki-decode``
and ``edge-jax analyze logit-lens`` are declared in :mod:`.cli`. MeKi's layer, its keys, its variants and its
fold live in :mod:`edge_jax.layers.token_memory.meki`."""
