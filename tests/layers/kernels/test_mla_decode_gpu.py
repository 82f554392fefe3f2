"""MLA absorbed decode, the GPU (Triton) kernel: interpreted on CPU against the masked reference, and
lowered for CUDA (Pallas's Triton lowering, no GPU needed)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    kernel_tol,
    lower_for_gpu,
)

from edge_jax.bench.kernels import rel_error
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.mla_decode import mla_decode_reference
from edge_jax.layers.kernels.mla_decode_gpu import mla_decode_gpu

pytestmark = pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")
# one jitted function for the module: a call with the same shapes and settings reuses its compile
kernel = jax.jit(mla_decode_gpu, static_argnames=("scale", "block_s", "splits", "interpret"))


def _inputs(B, S, H, C, R, dtype, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    shapes = [(B, H, C), (B, H, R), (B, S, C), (B, S, R)]
    return [jax.random.normal(k, s, jnp.float32).astype(dtype) for k, s in zip(ks, shapes)]


def _scale(C, R):
    return float(1 / np.sqrt(C // 4 + R))


# (id, buffer slots S, length per row, (H, C, R), block_s, splits); rows of one call differ in length, so
# each case covers several situations in one interpreted call (each costs ~1.5 s of XLA compile)
CASES = [
    # S not a multiple of block_s (its last block runs past the buffer): a full row, a partial last block,
    # a 1-slot row; 3 runs over 4 blocks (2 per run: the third run of row 0 and two of row 3 are empty)
    ("ragged_rows_differ", 60, (60, 45, 21, 1), (16, 128, 32), 16, 3),
    # H 4 -> 16, C 96 -> 128 padded; a full cache of whole blocks; more runs (5) than filled blocks
    ("padded_full_more_splits", 64, (64, 17), (4, 96, 16), 16, 5),
    # H 8 -> 16, R 8 -> 16 padded; the defaults: block_s 64, splits min(132, 4 blocks), 3 filled
    ("padded_rope_defaults", 200, (150,), (8, 64, 8), None, None),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("S,lengths,hcr,block_s,splits", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_matches_reference(S, lengths, hcr, block_s, splits, dtype):
    H, C, R = hcr
    args = _inputs(len(lengths), S, H, C, R, jnp.dtype(dtype)) + [jnp.asarray(lengths, jnp.int32)]
    want = mla_decode_reference(*args, scale=_scale(C, R))
    got = kernel(*args, scale=_scale(C, R), block_s=block_s, splits=splits, interpret=True)
    assert got.shape == want.shape and got.dtype == want.dtype == jnp.dtype(dtype)
    assert rel_error(got, want) < kernel_tol(dtype)


def test_slots_past_the_length_are_not_read():
    """NaN in every slot from each row's length on (inside its last block too): the masked loads
    never read them, so the output stays finite and equals the reference's on zeros there. (The
    shapes and settings of the padded_full_more_splits case: its compile is reused.)"""
    B, S, H, C, R = 2, 64, 4, 96, 16
    lengths = jnp.asarray([64, 17], jnp.int32)
    q, qr, lat, kr = _inputs(B, S, H, C, R, jnp.float32, seed=3)
    past_BS1 = (jnp.arange(S)[None] >= lengths[:, None])[..., None]
    want = mla_decode_reference(q, qr, *[jnp.where(past_BS1, 0.0, a) for a in (lat, kr)], lengths,
                                scale=_scale(C, R))
    got = kernel(q, qr, *[jnp.where(past_BS1, jnp.nan, a) for a in (lat, kr)], lengths,
                 scale=_scale(C, R), block_s=16, splits=5, interpret=True)
    assert np.isfinite(np.asarray(got)).all() and rel_error(got, want) < kernel_tol("float32")


def test_block_s_must_be_a_power_of_two():
    args = _inputs(1, 16, 16, 16, 16, jnp.float32) + [jnp.asarray([5], jnp.int32)]
    with pytest.raises(ValueError, match="power of two"):
        mla_decode_gpu(*args, scale=0.1, block_s=24)


@pytest.mark.gpu_compile
@pytest.mark.parametrize("B,S,H,C,R,dtype,splits", [
    (3, 60, 4, 96, 16, jnp.float32, 1),          # small, padded, ragged buffer: one 64-slot block, one run
    (1, 32768, 16, 512, 64, jnp.bfloat16, 132),  # PLM-1.8B's attention over a 32K-slot cache: a run per SM
], ids=["small_padded", "plm_32k"])
def test_lowers_for_gpu(B, S, H, C, R, dtype, splits):
    """Pallas's Triton lowering in full (power-of-two shapes, dot dims, the loop); only PTX needs a GPU."""
    structs = [jax.ShapeDtypeStruct(s, dtype) for s in [(B, H, C), (B, H, R), (B, S, C), (B, S, R)]]
    text = lower_for_gpu(lambda *a: mla_decode_gpu(*a, scale=_scale(C, R), interpret=False), *structs,
                         jax.ShapeDtypeStruct((B,), jnp.int32))
    assert text.replace('"', "").count(f"@{backend.TRITON_CALL}") == 1  # one kernel; the merge is plain XLA
    assert f"grid_x = {B} : i32, grid_y = {splits} : i32" in text
