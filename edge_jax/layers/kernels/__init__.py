"""Pallas kernels for the hot paths, one file each beside its pure-jnp ``*_reference``, and the
``model.kernels`` switch (:mod:`edge_jax.layers.kernels.backend`).

:data:`KERNEL_MODES` is here, where importing it costs no JAX (``edge-jax bench --help`` lists them)."""

KERNEL_MODES = ("xla", "pallas", "auto")  # model.kernels: what each means, edge_jax.layers.kernels.backend
