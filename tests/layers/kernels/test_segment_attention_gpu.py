"""The GPU (Triton) segment attention kernel: interpreted on CPU against the reference, and lowered for
CUDA (Pallas's Triton lowering in full) at a small shape and at the paper's Qwen3-4B-shaped layout."""
import re

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
from edge_jax.layers.kernels.segment_attention import segment_attention_reference
from edge_jax.layers.kernels.segment_attention_gpu import segment_attention_gpu

pytestmark = pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")


def _inputs(seed, B, N, L, H, G, K, S, dtype):
    """Random non-zero q/k/v/sink in ``dtype`` and a non-empty float32 memory (M small, z = 1 + |normal|);
    drawn with numpy (eager jax.random would compile once per shape, most of this file's time)."""
    rng = np.random.default_rng(seed)
    n = lambda *shape: jnp.asarray(rng.standard_normal(shape, np.float32).astype(jnp.dtype(dtype)))  # noqa: E731
    M = jnp.asarray(0.3 * rng.standard_normal((B * N, G, K, K), np.float32))
    z = jnp.asarray(1.0 + np.abs(rng.standard_normal((B * N, G, K), np.float32)))
    return n(B * N, L, H, K), n(B * N, L, G, K), n(B * N, L, G, K), n(B, S, G, K), n(B, S, G, K), M, z


# (dtype, B, N, L, H, G, K, S, block_q, block_k): several segments (N = 2) and the remaining part
# (N = 1, B = 2); sinks of 5 and 37 (not multiples of the key block) and none; L ragged against the
# blocks (full blocks below the diagonal, then masked diagonal blocks); bq = bk, bq < bk, bq > bk; GQA
# (4 heads on 2 groups, 2 on 1), MHA and H/G = 3; K = 8 and 12 (padded to 16), K = 16; default blocks
CASES = [
    ("float32", 1, 2, 40, 4, 2, 8, 5, 16, 16),
    ("bfloat16", 1, 2, 40, 4, 2, 8, 5, 16, 16),
    ("float32", 2, 1, 37, 2, 2, 16, 37, 16, 32),
    ("bfloat16", 2, 1, 37, 2, 2, 16, 37, 32, 16),
    ("float32", 1, 2, 40, 4, 2, 8, 0, 16, 16),
    ("bfloat16", 1, 2, 24, 2, 2, 8, 0, 16, 16),
    ("float32", 1, 2, 20, 2, 1, 12, 7, 16, 16),
    ("bfloat16", 2, 1, 13, 6, 2, 8, 3, None, None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}_B{}N{}L{}H{}G{}K{}S{}_bq{}bk{}".format(*c))
def test_gpu_kernel_matches_the_reference(case):
    dtype, B, N, L, H, G, K, S, bq, bk = case
    args = _inputs(L + S, B, N, L, H, G, K, S, dtype)
    got = jax.jit(lambda *a: segment_attention_gpu(*a, block_q=bq, block_k=bk, interpret=True))(*args)
    want = jax.jit(segment_attention_reference)(*args)
    assert got[0].dtype == want[0].dtype == jnp.dtype(dtype) and got[1].dtype == want[1].dtype == jnp.float32
    assert got[0].shape == want[0].shape == (B * N, L, H, K) and got[1].shape == want[1].shape
    assert rel_error(got[0], want[0]) < kernel_tol(dtype)
    assert rel_error(got[1], want[1]) < kernel_tol(dtype)


def test_bad_blocks_and_shapes_are_refused():
    args = _inputs(0, 1, 2, 16, 4, 2, 8, 3, "float32")
    with pytest.raises(ValueError, match="powers of two"):
        segment_attention_gpu(*args, block_q=24)
    with pytest.raises(ValueError, match="powers of two"):
        segment_attention_gpu(*args, block_k=8)
    with pytest.raises(ValueError, match="do not fit"):
        segment_attention_gpu(args[0][:, :, :3], *args[1:])


def _structs(B, N, L, H, G, K, S, dtype):
    f32 = jnp.float32
    shapes = [((B * N, L, H, K), dtype), ((B * N, L, G, K), dtype), ((B * N, L, G, K), dtype),
              ((B, S, G, K), dtype), ((B, S, G, K), dtype), ((B * N, G, K, K), f32), ((B * N, G, K), f32)]
    return [jax.ShapeDtypeStruct(s, d) for s, d in shapes]


# small shapes (padded K, ragged L, no sink), then the paper's layout on a Qwen3-4B-shaped base: 32
# query heads on 8 KV heads, K = V = 128, bf16, a 300-token sink, 4 segments of 2048 and a remaining
# part of 200 (N = 1) for a batch of 4
LOWERINGS = [(1, 2, 40, 4, 2, 8, 5, "float32"), (2, 1, 13, 6, 2, 8, 0, "bfloat16"),
             (1, 4, 2048, 32, 8, 128, 300, "bfloat16"), (4, 1, 200, 32, 8, 128, 300, "bfloat16")]


@pytest.mark.gpu_compile
@pytest.mark.parametrize("case", LOWERINGS, ids=lambda c: "B{}N{}L{}H{}G{}K{}S{}_{}".format(*c))
def test_gpu_kernel_lowers_for_cuda(case):
    B, N, L, H, G, K, S, dtype = case
    text = lower_for_gpu(lambda *a: segment_attention_gpu(*a, interpret=False), *_structs(*case))
    assert len(re.findall(r"stablehlo\.custom_call", text)) == 1
    if K == 128:  # aligned K: the kernel reads the inputs and writes [B*N, L, H, V] as they are
        assert not re.search(r"stablehlo\.(pad|transpose|slice|concatenate)", text)
        assert f"grid_x = {H} : i32, grid_y = {-(-L // 128)} : i32, grid_z = {B * N} : i32" in text
