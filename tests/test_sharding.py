"""edge_jax.sharding: the row lookup of a width-sharded table against ``jnp.take``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from edge_jax.sharding import activation_sharding, make_mesh, take_rows


@pytest.mark.parametrize("width", [8, 6])  # 6 does not split over fsdp=4: the plain take
@pytest.mark.parametrize("ids_shape", [(8, 6), (8, 6, 3)])
def test_take_rows_matches_take_with_gradients(width, ids_shape):
    mesh = make_mesh({"data": 2, "fsdp": 4, "tensor": 1}, jax.devices()[:8])
    kt, ki, kc = jax.random.split(jax.random.key(0), 3)
    table = jax.device_put(jax.random.normal(kt, (40, width)),
                           NamedSharding(mesh, P(None, "fsdp" if width % 4 == 0 else None)))
    ids = jax.random.randint(ki, ids_shape, 0, 40)
    cot = jax.random.normal(kc, ids_shape + (width,))

    def loss(fn, t):
        return jnp.sum(fn(t, ids) * cot)

    def sharded(t, i):
        with activation_sharding(mesh):
            return take_rows(t, i)

    def plain(t, i):
        return jnp.take(t, i, axis=0)

    got, want = jax.jit(sharded)(table, ids), plain(table, ids)
    np.testing.assert_array_equal(got, want)
    if width % 4 == 0:  # rows end in the batch layout, whole
        assert got.sharding.spec[0] == ("data", "fsdp") and set(got.sharding.spec[1:]) <= {None}
    np.testing.assert_allclose(jax.jit(jax.grad(lambda t: loss(sharded, t)))(table),
                               jax.grad(lambda t: loss(plain, t))(table), rtol=1e-6, atol=1e-6)
    assert take_rows(table, ids).shape == ids_shape + (width,)  # no mesh: jnp.take
