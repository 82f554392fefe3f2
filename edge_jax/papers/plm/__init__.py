"""PLM: grids, activation sparsity, KV-cache accounting, architecture stats, MLA decode benchmark.

Its registrations (:mod:`.plugin`): ``train.sparsity_batches`` and its evaluator, the Table 1 comparison of
``edge-jax params`` and the ``mla_decode`` cases of ``edge-jax bench kernels``; ``edge-jax bench mla-decode``
and ``edge-jax analyze kv-cache | sparsity`` are declared in :mod:`.cli`. MLA and the FFN kinds live in
:mod:`edge_jax.layers`."""
