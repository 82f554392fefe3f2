"""Plain causal attention through the library kernels (splash on TPU, cuDNN on GPU) against the XLA
path: splash interpreted on CPU and compiled for TPU with libtpu; cuDNN on a GPU only where one is present
(there the tests of the module run cuDNN in bfloat16 and the XLA path in float32)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    compile_for_tpu,
    kernel_tol,
    needs_extra,
    on_gpu,
    requires_devices,
    requires_gpu,
)
from jax.sharding import PartitionSpec as P

from edge_jax.layers.kernels import backend, flash
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.sharding import activation_sharding, make_mesh

CUDNN = "__cudnn$fmha"  # the custom calls of cuDNN's fused attention (fmhaSoftmax, fmhaSoftmaxBackward, ...)


def _qkv(key, B, T, H, G, K, dtype):
    kq, kk, kv = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, (B, T, h, K), jnp.float32).astype(dtype)
                 for k, h in ((kq, H), (kk, G), (kv, G)))


def _rel(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("T,H,G", [(384, 4, 2), (256, 2, 2)])  # 3x3 blocks of 128, GQA; one block, MHA
def test_splash_matches_the_xla_path(dtype, T, H, G):
    q, k, v = _qkv(jax.random.key(T + H), 2, T, H, G, 16, dtype)
    got = flash.causal_attention(q, k, v)
    assert got.dtype == q.dtype
    assert _rel(got, flash.causal_attention_reference(q, k, v)) < kernel_tol(dtype)


def test_splash_gradients_match():
    q, k, v = _qkv(jax.random.key(1), 1, 256, 4, 2, 16, "float32")
    w = jax.random.normal(jax.random.key(2), q.shape)

    def loss(fn):
        return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) * w), argnums=(0, 1, 2))(q, k, v)

    for got, want in zip(loss(flash.causal_attention), loss(flash.causal_attention_reference)):
        assert _rel(got, want) < 1e-5


def test_a_length_without_a_splash_block_takes_the_xla_path():
    assert flash.block_size(100) is None and flash.block_size(384) == 128 and flash.block_size(1024) == 512
    q, k, v = _qkv(jax.random.key(3), 1, 100, 4, 2, 16, "float32")
    np.testing.assert_array_equal(flash.causal_attention(q, k, v), flash.causal_attention_reference(q, k, v))


@requires_devices(4)
def test_on_a_mesh_each_device_runs_its_rows():
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 1}, jax.devices()[:4])
    q, k, v = _qkv(jax.random.key(4), 4, 128, 4, 2, 16, "float32")
    with activation_sharding(mesh):
        got = jax.jit(flash.causal_attention)(q, k, v)
    assert _rel(got, flash.causal_attention_reference(q, k, v)) < 1e-5


def test_auto_keeps_xla_on_cpu_and_pallas_forces_the_kernel():
    assert backend.use_pallas("auto", "flash") is (backend.platform() in ("tpu", "gpu"))
    assert backend.use_pallas("pallas", "flash") and not backend.use_pallas("xla", "flash")


def _runs_library_kernel(fn, *args) -> bool:
    """Whether ``fn`` runs the platform's library kernel: cuDNN's fused attention in the lowered module on a
    GPU, a (splash) ``pallas_call`` in the jaxpr elsewhere."""
    if on_gpu():
        return CUDNN in jax.jit(fn).lower(*args).as_text()
    return "pallas_call" in str(jax.make_jaxpr(fn)(*args))


def test_decoder_logits_with_the_library_kernel():
    """A GQA model at 128 tokens (one splash block): kernels=pallas runs the platform's library kernel in
    every layer (splash interpreted on CPU; cuDNN on a GPU, in bfloat16: it has no float32 kernel) and gives
    the XLA logits; ``auto`` keeps the XLA path on CPU bit for bit, and takes cuDNN on a GPU."""
    dtype = "bfloat16" if on_gpu() else "float32"

    def model(kernels):
        return DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                                     d_ff=64, dtype=dtype, kernels=kernels))

    tokens = jax.random.randint(jax.random.key(6), (2, 128), 0, 64)
    params = jax.jit(model("xla").init)(jax.random.key(7), tokens)
    want = model("xla").apply(params, tokens)
    assert _runs_library_kernel(model("pallas").apply, params, tokens)
    assert _rel(model("pallas").apply(params, tokens), want) < kernel_tol(dtype)
    if on_gpu():
        assert _runs_library_kernel(model("auto").apply, params, tokens)
    else:
        np.testing.assert_array_equal(model("auto").apply(params, tokens), want)


@pytest.mark.tpu_compile
@needs_extra("libtpu")
def test_splash_compiles_for_tpu():
    B, T, H, G, K = 4, 2048, 8, 2, 128
    fn = lambda q, k, v: flash.splash_attention(q, k, v, block=512, interpret=False)  # noqa: E731
    compiled = compile_for_tpu(fn, [((B, T, H, K), jnp.bfloat16), ((B, T, G, K), jnp.bfloat16),
                                    ((B, T, G, K), jnp.bfloat16)], (P("x"),) * 3, P("x"))
    # no [T, T] scores in HBM: the temporaries stay below one f32 score matrix per head
    assert compiled.memory_analysis().temp_size_in_bytes < H * T * T * 4


@requires_gpu
def test_cudnn_matches_the_xla_path_on_gpu():
    """cuDNN's fused attention through our flash module (bfloat16, 8 heads on 2 KV groups, 512 tokens): its
    forward and backward calls are in the step, and output and gradients meet a float32 XLA reference within
    the bfloat16 tolerance; float32 inputs take the XLA path."""
    q, k, v = _qkv(jax.random.key(5), 2, 512, 8, 2, 64, "bfloat16")
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    w = jax.random.normal(jax.random.key(6), q.shape, jnp.float32)

    def grads(fn):
        return jax.grad(lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * w), argnums=(0, 1, 2))

    assert CUDNN + "Softmax" in jax.jit(flash.causal_attention).lower(q, k, v).as_text()
    assert CUDNN + "SoftmaxBackward" in jax.jit(grads(flash.causal_attention)).lower(q, k, v).as_text()
    got = jax.jit(flash.causal_attention)(q, k, v)
    assert got.dtype == jnp.bfloat16 and _rel(got, flash.causal_attention_reference(*f32)) < kernel_tol("bfloat16")
    want_grads = jax.jit(grads(flash.causal_attention_reference))(*f32)
    for g, want in zip(jax.jit(grads(flash.causal_attention))(q, k, v), want_grads):
        assert float(jnp.abs(want).max()) > 0 and _rel(g, want) < kernel_tol("bfloat16")
    np.testing.assert_array_equal(flash.causal_attention(*f32), flash.causal_attention_reference(*f32))
