"""One mesh builder for training and ``edge-jax compile``, on multi-host TPU topologies from libtpu
(16 hosts of 4 chips for v5p-128, 64 for v5e-256, two such slices over DCN): the same device order
whichever way it is called, and every host's devices holding one block of the batch rows."""
import pytest
from helpers import needs_extra

from edge_jax.compile import aot
from edge_jax.compile.chips import make_target
from edge_jax.config import ConfigError
from edge_jax.sharding import batch_sharding, make_mesh, process_block

pytestmark = [needs_extra("libtpu"), pytest.mark.tpu_compile]

CASES = [("v5p-128", 1, (1, -1, 1)), ("v5p-128", 1, (1, -1, 4)), ("v5p-128", 1, (4, 4, 4)),
         ("v5e-256", 1, (1, -1, 1)), ("v5e-256", 1, (1, -1, 2)), ("v5e-256", 1, (16, 16, 1)),
         ("v5e-256", 1, (1, 32, 8)), ("v5e-256", 2, (2, -1, 1)), ("v5e-256", 2, (2, 128, 2))]


def _mesh_cfg(sizes):
    return dict(zip(("data", "fsdp", "tensor"), sizes))


@pytest.mark.parametrize("name,slices,sizes", CASES)
def test_training_and_compile_build_the_same_mesh(name, slices, sizes):
    """``compile`` (mesh_for over the target) and training (make_mesh over jax.devices(), listed here
    backwards to show the order they come in does not matter) lay the slice out alike."""
    target = make_target(name, slices)
    compiled = aot.mesh_for(target, _mesh_cfg(sizes))
    trained = make_mesh(_mesh_cfg(sizes), list(reversed(target.devices)))
    assert compiled.shape == trained.shape and compiled.devices.size == len(target.devices)
    assert [d.id for d in compiled.devices.flat] == [d.id for d in trained.devices.flat]


@pytest.mark.parametrize("name,slices,sizes", CASES)
def test_every_host_loads_one_block_of_rows(name, slices, sizes):
    """process_block, evaluated for each of the slice's processes, finds one block of equal blocks,
    and the blocks together are the whole batch; with several slices data runs across them."""
    target = make_target(name, slices)
    mesh = aot.mesh_for(target, _mesh_cfg(sizes))
    rows = mesh.shape["data"] * mesh.shape["fsdp"] * 2
    processes = sorted({d.process_index for d in target.devices})
    assert len(processes) == len(target.devices) // 4  # four chips a host
    blocks = {process_block(batch_sharding(mesh), rows, process=p) for p in processes}
    counts = {n for _, n in blocks}
    assert len(counts) == 1 and sorted(j for j, _ in blocks) == list(range(counts.pop()))
    per_slice = mesh.shape["data"] // slices
    slice_of = [{getattr(d, "slice_index", 0) or 0 for d in mesh.devices[i].flat} for i in range(mesh.shape["data"])]
    assert slice_of == [{i // per_slice} for i in range(mesh.shape["data"])]


def test_a_mesh_that_strays_from_the_hosts_is_caught():
    """The check the builder applies: the topology-aware layout alone (mesh_utils' own) would give
    the hosts of v5p-128 rows scattered over the batch under fsdp=64."""
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh

    target = make_target("v5p-128")
    scattered = Mesh(mesh_utils.create_device_mesh((1, 64, 1), list(target.devices)), ("data", "fsdp", "tensor"))
    with pytest.raises(ConfigError, match="not one block"):
        for p in sorted({d.process_index for d in target.devices}):
            process_block(batch_sharding(scattered), 128, process=p)


def test_a_two_slice_step_compiles_with_tensor_inside_each_slice(tiny_config):
    """data=2 over two v5e-16 slices, tensor=2 within each: mesh_utils alone finds no such layout."""
    c = tiny_config(**{"model.vocab_size": 256, "data.batch_size": 16, "mesh.data": 2, "mesh.fsdp": 8,
                       "mesh.tensor": 2})
    stats = aot.compile_train(c, make_target("v5e-16", 2))
    assert stats.mesh == {"data": 2, "fsdp": 8, "tensor": 2} and stats.temp_bytes > 0
