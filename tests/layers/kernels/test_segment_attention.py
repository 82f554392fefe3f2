"""EdgeInfinite's segment attention kernel (local attention over sink + segment, memory readout) against
its reference and against the XLA path of ``segmented_attention``: interpreted on CPU (the Triton variant
compiled on a GPU), compiled for TPU with libtpu, and through a tiny EdgeInfinite model."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    compile_for_tpu,
    emulated,
    kernel_tol,
    needs_extra,
    on_gpu,
    perturbed,
    triton_blocks_only,
)
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

from edge_jax.layers.infini import compressive as infini
from edge_jax.layers.infini import segmented
from edge_jax.layers.infini.spec import InfiniSpec
from edge_jax.layers.kernels.segment_attention import segment_attention, segment_attention_reference
from edge_jax.layers.rope import Rope
from edge_jax.models import DecoderLM, ModelConfig


def _rel(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _inputs(key, B, N, L, H, G, K, S, dtype):
    """Random q/k/v/sink in ``dtype`` and a non-empty float32 memory (z > 0) for B*N rows."""
    ks = jax.random.split(key, 7)
    n = lambda k, shape: jax.random.normal(k, shape, jnp.float32).astype(dtype)  # noqa: E731
    M = 0.3 * jax.random.normal(ks[5], (B * N, G, K, K), jnp.float32)
    z = 1.0 + jnp.abs(jax.random.normal(ks[6], (B * N, G, K), jnp.float32))
    return (n(ks[0], (B * N, L, H, K)), n(ks[1], (B * N, L, G, K)), n(ks[2], (B * N, L, G, K)),
            n(ks[3], (B, S, G, K)), n(ks[4], (B, S, G, K)), M, z)


# (dtype, B, N, L, H, G, K, S, block_q, block_k): ragged L (padded to the blocks), several query and
# key blocks (causal blocks skipped), bq > bk and bq < bk, no sink, the paper's unaligned sink of 300,
# the remaining part (N = 1) in one short block (a part smaller than the blocks), MHA
CASES = [
    ("float32", 2, 3, 40, 4, 2, 8, 5, 16, 16),
    ("bfloat16", 2, 3, 40, 4, 2, 8, 5, 16, 16),
    ("float32", 1, 2, 40, 4, 2, 8, 0, 16, 8),
    ("bfloat16", 1, 2, 24, 4, 2, 8, 300, 8, 16),
    ("float32", 1, 2, 24, 4, 2, 8, 300, 8, 16),
    ("float32", 2, 1, 13, 6, 2, 16, 3, 512, 512),
    ("bfloat16", 1, 2, 32, 2, 2, 8, 7, 16, 16),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}_B{}N{}L{}H{}G{}K{}S{}_bq{}bk{}".format(*c))
def test_kernel_matches_the_reference(case):
    dtype, B, N, L, H, G, K, S, bq, bk = case
    triton_blocks_only(bq, bk)
    args = _inputs(jax.random.key(L + S), B, N, L, H, G, K, S, dtype)
    got = jax.jit(lambda *a: segment_attention(*a, block_q=bq, block_k=bk))(*args)
    want = jax.jit(segment_attention_reference)(*args)
    assert got[0].dtype == want[0].dtype == jnp.dtype(dtype) and got[1].dtype == want[1].dtype == jnp.float32
    assert got[0].shape == want[0].shape == (B * N, L, H, K) and got[1].shape == want[1].shape
    assert _rel(got[0], want[0]) < kernel_tol(dtype)
    assert _rel(got[1], want[1]) < kernel_tol(dtype)


def test_gradients_match_the_kernel_and_the_reference():
    """The backward (the reference's VJP) against finite differences of the kernel's own forward, and
    against the reference's gradient w.r.t. every input. Blocks of 8 (3 x 3 of the 24 rows); on a GPU the
    Triton variant's smallest, 16."""
    args = _inputs(jax.random.key(0), 1, 2, 24, 4, 2, 8, 5, "float32")
    w_dot, w_mem = (jax.random.normal(k, (2, 24, 4, 8)) for k in jax.random.split(jax.random.key(1)))

    def loss(fn):
        def f(*a):
            a_dot, a_mem = fn(*a)
            return jnp.sum(a_dot * w_dot) + 0.1 * jnp.sum(a_mem * w_mem)
        return f

    block = 16 if on_gpu() else 8
    kernel = lambda *a: segment_attention(*a, block_q=block, block_k=block)  # noqa: E731
    got = jax.jit(jax.grad(loss(kernel), argnums=tuple(range(7))))(*args)
    want = jax.jit(jax.grad(loss(segment_attention_reference), argnums=tuple(range(7))))(*args)
    for g, w in zip(got, want):
        assert _rel(g, w) < 1e-5
    check_grads(jax.jit(loss(kernel)), args, order=1, modes=["rev"], atol=2e-2, rtol=2e-2)


def _segmented_inputs(key, dtype, T, sink, window, segment, update, B=2, H=4, G=2, K=8):
    spec = InfiniSpec(infini_hidden=8, infini_gate_init=0.5, infini_sink=sink, infini_window=window,
                      infini_segment=segment, infini_update=update)
    layout = infini.segment_layout(T, sink, window, segment)
    kq, kk, kv, kg = jax.random.split(key, 4)
    gate = infini.MemoryGate(H, K, spec.hidden, spec.gate_init)
    params = {"params": perturbed(gate.init(kg, jnp.zeros((1, 1, H, K)), jnp.zeros((1, 1, H, K)), False), 3)}
    normal = lambda k, h: jax.random.normal(k, (B, T, h, K), jnp.float32).astype(dtype)  # noqa: E731
    return (normal(kq, H), normal(kk, G), normal(kv, G), layout, Rope(1e4), spec), gate, params


# (dtype, update, T, sink, window, segment): N segments and a remaining part, with and without sink,
# unaligned sizes, linear and delta memory
LAYOUTS = [("float32", "linear", 41, 4, 4, 8), ("bfloat16", "delta", 41, 4, 4, 8),
           ("float32", "delta", 45, 0, 5, 12), ("bfloat16", "linear", 70, 7, 3, 20)]


@pytest.mark.parametrize("case", LAYOUTS, ids=lambda c: "{}_{}_T{}S{}W{}L{}".format(*c))
def test_segmented_attention_with_the_kernel_matches_the_xla_path(case):
    dtype, update, *layout = case
    args, gate, params = _segmented_inputs(jax.random.key(layout[0]), dtype, *layout, update)
    assert args[3].n_segments >= 2 and args[3].remaining > 0

    def run(kernels):
        fn = lambda p, q, k, v: gate.apply(p, method=lambda g: segmented.segmented_attention(  # noqa: E731
            q, k, v, *args[3:], g, kernels=kernels))
        return jax.jit(fn)(params, *args[:3])

    (got, got_state), (want, want_state) = run("pallas"), run("xla")
    assert got.dtype == want.dtype and _rel(got, want) < kernel_tol(dtype)
    for name in want_state:  # the state is the XLA path's in both (the kernel only reads the memory)
        np.testing.assert_array_equal(np.asarray(got_state[name]), np.asarray(want_state[name]))
    auto, _ = run("auto")  # on CPU: the XLA path, bit for bit
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(auto), np.asarray(want))


EI = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
                 infini_hidden=8, infini_sink=4, infini_window=4, infini_segment=8, infini_gate_init=0.5)


@pytest.mark.parametrize("variant", ["tpu", "gpu"])
def test_edgeinfinite_model_with_the_kernel_matches_the_xla_path(variant):
    """41 tokens: 4 sink, 4 segments of 8, 5 remaining; logits and the gradient w.r.t. the memory gates.
    ``variant`` gpu: the Triton kernel, wired in as on a GPU, run by the interpreter."""
    tokens = jax.random.randint(jax.random.key(1), (2, 41), 0, EI.vocab_size)
    params = perturbed(nn.unbox(jax.jit(DecoderLM(EI).init)(jax.random.key(0), tokens[:, :8])["params"]), 1)
    w = jax.random.normal(jax.random.key(2), (2, 41, EI.vocab_size))

    def run(kernels):
        model = DecoderLM(dataclasses.replace(EI, kernels=kernels))

        def loss(gates):
            p = {**params, **{k: {**params[k], "attn": {**params[k]["attn"], "memory_gate": g}}
                              for k, g in gates.items()}}
            logits = jax.jit(model.apply)({"params": p}, tokens)
            return jnp.sum(logits * w), logits

        gates = {k: params[k]["attn"]["memory_gate"] for k in params if k.startswith("layers_")}
        assert len(gates) == EI.n_layers
        with emulated(variant if kernels == "pallas" else "tpu"):
            jaxpr = str(jax.make_jaxpr(jax.grad(loss, has_aux=True))(gates))
            assert ("num_warps" in jaxpr) is (kernels == "pallas" and variant == "gpu")
            return jax.jit(jax.grad(loss, has_aux=True))(gates)

    (got_grad, got), (want_grad, want) = run("pallas"), run("xla")
    assert _rel(got, want) < 1e-5
    for g, w_ in zip(jax.tree_util.tree_leaves(got_grad), jax.tree_util.tree_leaves(want_grad)):
        assert _rel(g, w_) < 1e-5


def test_bad_blocks_and_shapes_are_refused():
    """The TPU variant's rules (on a GPU too, where the step is emulated for a TPU)."""
    args = _inputs(jax.random.key(0), 1, 2, 16, 4, 2, 8, 3, "float32")
    with emulated("tpu"):
        with pytest.raises(ValueError, match="multiples of 8"):
            segment_attention(*args, block_q=16, block_k=24)
        with pytest.raises(ValueError, match="do not fit"):
            segment_attention(args[0][:, :, :3], *args[1:])


@pytest.mark.tpu_compile
@needs_extra("libtpu")
@pytest.mark.parametrize("N,L,S", [(2, 512, 128), (1, 200, 300)], ids=["segments", "remaining_unaligned_sink"])
def test_segment_attention_compiles_for_tpu(N, L, S):
    """bf16, B*N rows sharded over a v5e 2x2 slice: 2 segments of 512 behind a 128-token sink, and a
    remaining part of 200 tokens behind the paper's 300-token sink (both unaligned, padded inside)."""
    B, H, G, K = 4, 8, 2, 128
    bf, f32 = jnp.bfloat16, jnp.float32
    structs = [((B * N, L, H, K), bf), ((B * N, L, G, K), bf), ((B * N, L, G, K), bf), ((B, S, G, K), bf),
               ((B, S, G, K), bf), ((B * N, G, K, K), f32), ((B * N, G, K), f32)]
    fn = lambda *a: segment_attention(*a, interpret=False)  # noqa: E731
    compiled = compile_for_tpu(fn, structs, (P("x"),) * 7, (P("x"), P("x")))
    mem = compiled.memory_analysis()
    print(f"segment_attention N={N} L={L} S={S} per device: arguments {mem.argument_size_in_bytes} B, "
          f"outputs {mem.output_size_in_bytes} B, temporaries {mem.temp_size_in_bytes} B")
    # outputs: A_dot (bf16) and A_mem (f32) of this device's rows; no score matrix in HBM
    assert 0 <= mem.output_size_in_bytes - B * N // 4 * L * H * K * (2 + 4) < 4096
    assert mem.temp_size_in_bytes < B * N // 4 * H * L * (S + L) * 4
