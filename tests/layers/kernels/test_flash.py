"""Plain causal attention through the library kernels (splash on TPU, cuDNN on GPU) against the XLA
path: interpreted on CPU, compiled for TPU with libtpu, on a GPU only where one is present."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import compile_for_tpu, needs_extra
from jax.sharding import PartitionSpec as P

from edge_jax.layers.kernels import backend, flash
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.sharding import activation_sharding, make_mesh

TOL = {"float32": 1e-5, "bfloat16": 2e-2}


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
    assert _rel(got, flash.causal_attention_reference(q, k, v)) < TOL[dtype]


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


def test_on_a_mesh_each_device_runs_its_rows():
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 1}, jax.devices()[:4])
    q, k, v = _qkv(jax.random.key(4), 4, 128, 4, 2, 16, "float32")
    with activation_sharding(mesh):
        got = jax.jit(flash.causal_attention)(q, k, v)
    assert _rel(got, flash.causal_attention_reference(q, k, v)) < 1e-5


def test_auto_keeps_xla_on_cpu_and_pallas_forces_the_kernel():
    assert backend.use_pallas("auto", "flash") is (backend.platform() in ("tpu", "gpu"))
    assert backend.use_pallas("pallas", "flash") and not backend.use_pallas("xla", "flash")


def test_decoder_logits_with_the_library_kernel():
    """A GQA model at 128 tokens (one splash block): kernels=pallas runs splash (interpreted) in
    every layer and gives the XLA logits; ``auto`` on CPU keeps the XLA path bit for bit."""
    def model(kernels):
        return DecoderLM(ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                                     d_ff=64, kernels=kernels))

    tokens = jax.random.randint(jax.random.key(6), (2, 128), 0, 64)
    params = model("xla").init(jax.random.key(7), tokens)
    want = model("xla").apply(params, tokens)
    assert "pallas_call" in str(jax.make_jaxpr(model("pallas").apply)(params, tokens))
    assert _rel(model("pallas").apply(params, tokens), want) < 1e-5
    np.testing.assert_array_equal(model("auto").apply(params, tokens), want)


@needs_extra("libtpu")
def test_splash_compiles_for_tpu():
    B, T, H, G, K = 4, 2048, 8, 2, 128
    fn = lambda q, k, v: flash.splash_attention(q, k, v, block=512, interpret=False)  # noqa: E731
    compiled = compile_for_tpu(fn, [((B, T, H, K), jnp.bfloat16), ((B, T, G, K), jnp.bfloat16),
                                    ((B, T, G, K), jnp.bfloat16)], (P("x"),) * 3, P("x"))
    # no [T, T] scores in HBM: the temporaries stay below one f32 score matrix per head
    assert compiled.memory_analysis().temp_size_in_bytes < H * T * T * 4


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (cuDNN attention)")
def test_cudnn_matches_the_xla_path_on_gpu():
    q, k, v = _qkv(jax.random.key(5), 2, 512, 8, 2, 64, "bfloat16")
    assert _rel(flash.causal_attention(q, k, v), flash.causal_attention_reference(q, k, v)) < TOL["bfloat16"]
