"""Pallas kernels for the hot paths, one file each beside its pure-jnp ``*_reference``, and the
``model.kernels`` switch (:mod:`edge_jax.layers.kernels.backend`)."""
