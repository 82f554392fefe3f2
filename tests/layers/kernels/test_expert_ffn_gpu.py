"""The GPU (Pallas Triton) expert FFN against the reference: interpreted on CPU over ragged fills,
non-dividing shapes and dtypes, and lowered for CUDA with jax.export (small and PhiMoE shapes)."""
import jax
import jax.numpy as jnp
import pytest
from helpers import (
    check_expert_rows,
    expert_group,
    kernel_tol,
    lower_for_gpu,
)

from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.expert_ffn import expert_ffn_reference
from edge_jax.layers.kernels.expert_ffn_gpu import block_sizes, expert_ffn_gpu

pytestmark = pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")




# (G, C, D, F, valid rows per expert, dtype, block sizes). Compiling the interpreted kernels is
# what costs (~2-3 s a case), so each case covers several things
CASES = {
    # an empty expert between live ones, dead row tiles, a partial live tile (13 of 16 rows),
    # several chunks in both K loops, every dim divided by its block
    "f32_tiles": (3, 32, 128, 256, [13, 0, 32], "float32", dict(block_c=16, block_f=128, block_r=32)),
    # defaults with C < 16 (one 16-row tile), D 96 and F 200: no block divides any dim
    "f32_small_defaults": (2, 12, 96, 200, [5, 12], "float32", {}),
    "bf16_small_defaults": (2, 12, 96, 200, [12, 3], "bfloat16", {}),
    # C 48 under 32-row tiles (a live partial tile past C), F 384 under 256-column tiles
    "bf16_non_divisors": (2, 48, 128, 384, [40, 17], "bfloat16", dict(block_c=32, block_f=256)),
    # requests rounded down to powers of two: 32 rows, 128 columns, 32-wide chunks (D 80 = 2.5 x 32)
    "f32_rounded_blocks": (2, 48, 80, 384, [33, 0], "float32", dict(block_c=40, block_f=200, block_r=48)),
    "f32_all_empty": (2, 16, 32, 64, [0, 0], "float32", {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_reference(name):
    G, C, D, F, count, dtype, blocks = CASES[name]
    args = (*expert_group(G, C, D, F, dtype, seed=len(name)), jnp.asarray(count, jnp.int32))
    got = jax.jit(lambda *a: expert_ffn_gpu(*a, interpret=True, **blocks))(*args)
    assert got.dtype == args[0].dtype and got.shape == (G, C, D)
    check_expert_rows(got, expert_ffn_reference(*args), count, kernel_tol(dtype))


def test_block_sizes_are_powers_of_two_of_at_least_16():
    assert block_sizes(128, 4096, 6400) == dict(bc=64, bf=128, bd=128, bk1=64, bk2=64)  # PhiMoE, defaults
    assert block_sizes(12, 96, 200) == dict(bc=16, bf=128, bd=128, bk1=64, bk2=64)  # C < 16: one 16-row tile
    assert block_sizes(48, 80, 384, 40, 200, 48) == dict(bc=32, bf=128, bd=128, bk1=32, bk2=32)
    assert block_sizes(256, 64, 32, 512, 512, 512) == dict(bc=256, bf=32, bd=64, bk1=64, bk2=32)  # capped
    assert block_sizes(8, 8, 8, 4, 4, 4) == dict(bc=16, bf=16, bd=16, bk1=16, bk2=16)  # dot's minimum


# ---- CUDA: Pallas's Triton lowering in full (no PTX compile without a GPU)

LOWER = {  # (G, C, D, F, dtype, block sizes)
    "f32_masked": (3, 12, 96, 200, "float32", {}),
    "bf16_masked": (2, 48, 128, 384, "bfloat16", dict(block_c=32, block_f=256)),
    "phimoe_4x128": (4, 128, 4096, 6400, "bfloat16", {}),
    "phimoe_8x256_f256": (8, 256, 4096, 6400, "bfloat16", dict(block_f=256)),  # 6400 = 25 x 256: masked tiles
}


@pytest.mark.gpu_compile
@pytest.mark.parametrize("name", sorted(LOWER))
def test_lowers_for_cuda(name):
    G, C, D, F, dtype, blocks = LOWER[name]
    dt = jnp.dtype(dtype)
    structs = [jax.ShapeDtypeStruct(s, dt) for s in [(G, C, D), (G, D, F), (G, D, F), (G, F, D)]]
    text = lower_for_gpu(lambda *a: expert_ffn_gpu(*a, interpret=False, **blocks), *structs,
                         jax.ShapeDtypeStruct((G,), jnp.int32))
    assert "expert_ffn_gate_up" in text and "expert_ffn_down" in text
