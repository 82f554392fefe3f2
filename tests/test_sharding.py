"""edge_jax.sharding: the mesh builder (on simulated CPU devices and stand-in devices of several
processes and slices; TPU topologies in tests/compile/test_mesh_builder.py) and the row lookup of a
width-sharded table against ``jnp.take``."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import requires_devices
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from edge_jax.config import ConfigError
from edge_jax.sharding import activation_sharding, device_grid, make_mesh, rows_in_blocks, take_rows


@dataclasses.dataclass(frozen=True)
class Stand:
    """A device of a job this test does not run: what the builder reads of one (a CPU platform, so
    mesh_utils lays its devices out in the given order)."""
    id: int
    process_index: int
    slice_index: int = 0
    platform: str = "cpu"
    device_kind: str = "cpu"


@requires_devices(8)
def test_simulated_cpu_devices_keep_their_order_and_a_smaller_mesh_takes_the_first():
    devices = jax.devices()[:8]
    mesh = make_mesh({"data": 2, "fsdp": -1, "tensor": 2}, devices)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2} and list(mesh.devices.flat) == devices
    assert list(make_mesh({"data": 2, "fsdp": 2, "tensor": 1}, devices).devices.flat) == devices[:4]
    with pytest.raises(ConfigError, match="needs 16 devices, only 8 present") as e:
        make_mesh({"data": 2, "fsdp": 8, "tensor": 1}, devices)
    assert "\n" not in str(e.value)


def test_each_process_keeps_one_block_of_rows_whatever_order_its_devices_come_in():
    """Devices listed alternately by process (0, 1, 0, 1 ...): laid out in that order, process 0 would
    hold rows 0, 2, 4 ...; the builder makes each host a granule, tensor first, so each holds one block."""
    devices = [Stand(i, i % 2) for i in range(8)]
    assert not rows_in_blocks(np.asarray(devices, dtype=object).reshape(1, 8, 1))
    for shape in [(1, 8, 1), (2, 4, 1), (1, 4, 2), (4, 1, 2), (1, 2, 4), (1, 1, 8)]:
        grid = device_grid(shape, devices)
        assert grid.shape == shape and sorted(d.id for d in grid.flat) == list(range(8))
        assert rows_in_blocks(grid), shape
    assert [d.process_index for d in device_grid((1, 8, 1), devices).flat] == [0] * 4 + [1] * 4


def test_several_slices_put_data_across_them():
    devices = [Stand(i, i // 2, slice_index=i // 4) for i in range(8)][::-1]
    grid = device_grid((2, 2, 2), devices)
    assert [d.slice_index for d in grid[:, 0, 0]] == [0, 1] and rows_in_blocks(grid)
    with pytest.raises(ConfigError, match="mesh data=1 must be a multiple of the 2 slices") as e:
        device_grid((1, 4, 2), devices)
    assert "\n" not in str(e.value)


def test_a_job_of_several_processes_uses_every_device():
    with pytest.raises(ConfigError, match="uses 4 of the 8 devices of a 2-process job; make data\\*fsdp\\*tensor = 8"):
        make_mesh({"data": 2, "fsdp": 2, "tensor": 1}, [Stand(i, i // 4) for i in range(8)])


@requires_devices(8)
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
