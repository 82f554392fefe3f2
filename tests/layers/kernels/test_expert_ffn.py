"""The grouped capacity expert FFN kernel (NPUMoE) against its reference: interpreted on CPU over
shapes, dtypes, fills and block sizes, its gradients, AOT-compiled for TPU with libtpu, and in the
model (capacity_moe, the MoE decoder, the NPUMoE runtime) against the XLA path. On a GPU the same tests
run the Triton variant compiled (float32 dots exact: helpers.precise_dots)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    check_expert_rows,
    compile_for_tpu,
    emulated,
    expert_group,
    kernel_tol,
    needs_extra,
    requires_devices,
)
from jax.sharding import PartitionSpec as P

from edge_jax.bench.kernels import KERNEL_CASES, rel_error
from edge_jax.layers.kernels.expert_ffn import (
    block_sizes,
    expert_ffn,
    expert_ffn_reference,
    grouped_swiglu,
    swiglu,
)
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import MoEExec, tiered_plan, uniform_plan
from edge_jax.models import DecoderLM, ModelConfig

# (G, C, D, F, valid rows per expert, dtype, block sizes): the grid is G x C/block_c x F/block_f
CASES = {
    "f32_tiles": (3, 32, 128, 256, [0, 13, 32], "float32", dict(block_c=16, block_f=128, block_r=8)),
    "bf16_tiles": (3, 32, 128, 256, [0, 13, 32], "bfloat16", dict(block_c=16, block_f=128, block_r=16)),
    "f32_sub_blocks": (2, 64, 128, 384, [40, 64], "float32", dict(block_f=128, block_r=16)),  # 4 sub-blocks
    "bf16_non_divisors": (2, 48, 128, 384, [17, 48], "bfloat16", dict(block_c=40, block_f=200)),  # 16 x 128
    "f32_full_dims": (2, 24, 64, 96, [24, 5], "float32", {}),  # blocks = the whole (untiled) dims
    "f32_empty_between_live": (4, 16, 128, 256, [9, 0, 0, 16], "float32", dict(block_c=8, block_f=128)),
    "f32_all_empty": (2, 16, 128, 128, [0, 0], "float32", {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_reference(name):
    G, C, D, F, count, dtype, blocks = CASES[name]
    args = (*expert_group(G, C, D, F, dtype, seed=len(name)), jnp.asarray(count, jnp.int32))
    got = jax.jit(lambda *a: expert_ffn(*a, **blocks))(*args)
    assert got.dtype == args[0].dtype and got.shape == (G, C, D)
    check_expert_rows(got, expert_ffn_reference(*args), count, kernel_tol(dtype))


def test_block_sizes_pick_the_largest_aligned_divisor():
    assert block_sizes(48, 384, jnp.bfloat16, 40, 200) == (16, 128, 16)  # 16-row bf16 tiles, 128 columns
    assert block_sizes(48, 384, jnp.float32, 40, 200) == (24, 128, 24)
    assert block_sizes(256, 6400, jnp.bfloat16) == (256, 256, 128)  # PhiMoE d_ff 6400 = 25 x 256
    assert block_sizes(1024, 2048, jnp.bfloat16) == (512, 512, 128)
    assert block_sizes(13, 100, jnp.float32, 8, 64) == (13, 100, 13)  # no aligned divisor: whole dims


def test_gradients_match_the_reference():
    x, gate, up, down = expert_group(3, 32, 128, 256)
    count = jnp.asarray([7, 0, 32], jnp.int32)
    w = jax.random.normal(jax.random.key(9), x.shape)

    def grads(fn):
        return jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a, count) * w), argnums=(0, 1, 2, 3)))(x, gate, up, down)

    got = grads(lambda *a: expert_ffn(*a, block_c=16, block_f=128, block_r=8))
    for g, want in zip(got, grads(expert_ffn_reference)):
        assert float(jnp.abs(want).max()) > 0 and rel_error(g, want) < 1e-5
    assert not np.any(np.asarray(got[0][1])) and not np.any(np.asarray(got[0][0, 7:]))  # no rows, no gradient


def test_dispatch_follows_model_kernels():
    args = (*expert_group(2, 8, 16, 24), jnp.asarray([8, 3], jnp.int32))

    def runs_kernel(mode):
        return "pallas_call" in str(jax.make_jaxpr(lambda *a: grouped_swiglu(*a, mode))(*args))

    # auto keeps XLA on every platform: not measured faster on a GPU (0.92-1.01x), not timed on a TPU
    assert runs_kernel("pallas") and not runs_kernel("xla") and not runs_kernel("auto")
    np.testing.assert_array_equal(grouped_swiglu(*args, "xla"), swiglu(*args[:4]))


def test_small_bench_cases_agree():
    cases = KERNEL_CASES.get("expert_ffn")(True)
    assert {c.dtype for c in cases} == {"float32", "bfloat16"}
    for c in cases:
        assert c.flops == 2 * 3 * 52 * 128 * 256  # valid rows only
        assert rel_error(jax.jit(c.kernel)(*c.args), c.reference(*c.args)) < kernel_tol(c.dtype)


# ---- TPU: Mosaic compiles the kernel for a v5e:2x2 slice, groups sharded over the chips

TPU = {  # (G, C, D, F, dtype, block sizes)
    "bf16_defaults": (8, 256, 1024, 2048, "bfloat16", {}),
    "bf16_small_tiles": (8, 256, 1024, 2048, "bfloat16", dict(block_c=64, block_f=256, block_r=32)),
    "f32_defaults": (8, 128, 512, 1024, "float32", {}),
    "phimoe_4x256": (4, 256, 4096, 6400, "bfloat16", {}),  # the bench's largest tier at PhiMoE's experts
}


@pytest.mark.tpu_compile
@needs_extra("libtpu")
@pytest.mark.parametrize("name", sorted(TPU))
def test_compiles_for_tpu(name):
    G, C, D, F, dtype, blocks = TPU[name]
    dt = jnp.dtype(dtype)
    structs = [((G, C, D), dt), ((G, D, F), dt), ((G, D, F), dt), ((G, F, D), dt), ((G,), jnp.int32)]
    exe = compile_for_tpu(lambda *a: expert_ffn(*a, interpret=False, **blocks), structs, (P("x"),) * 5, P("x"))
    mem = exe.memory_analysis()
    print(f"\nexpert_ffn {name} on TPU v5e:2x2 (per chip): {mem}")
    shard = G // 4
    assert mem.output_size_in_bytes == shard * C * D * dt.itemsize
    assert mem.argument_size_in_bytes >= shard * (C * D + 3 * D * F) * dt.itemsize


# ---- in the model: the kernel (interpreted) against the XLA path, float32


def _routed(n=60, d=16, f=128, e=8, k=2, seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    experts = tuple(jnp.asarray(rng.normal(size=s) / np.sqrt(s[1]), jnp.float32) for s in [(e, d, f), (e, d, f),
                                                                                            (e, f, d)])
    logits = rng.normal(size=(n, e)) + np.linspace(2, -2, e)
    ids = np.argsort(-logits, 1)[:, :k]
    w = rng.uniform(0.2, 1.0, (n, k))
    return (x, jnp.asarray(ids, jnp.int32), jnp.asarray(w, jnp.float32),
            jnp.asarray(rng.random(n) + 0.1, jnp.float32), jnp.arange(n) < n - 5), experts


LOAD = np.array([40, 25, 12, 8, 6, 4, 3, 2])
PLAN = tiered_plan(LOAD, 60, 2, group=2, hot_fraction=0.75)  # tiers, groups of 2, two fallback experts


def test_capacity_moe_with_the_kernel():
    chunk, experts = _routed()
    for plan in (PLAN, uniform_plan(8, 6, 4)):  # the uniform plan drops copies of the busy experts
        run = jax.jit(lambda *a, p=plan, m="xla": execute.capacity_moe(*a, experts, p, kernels=m), static_argnames="m")
        (want, stats), (got, _) = run(*chunk), run(*chunk, m="pallas")
        assert float(jnp.abs(want).max()) > 0 and rel_error(got, want) < 1e-5
    assert int(stats["dropped"]) > 0


def test_npumoe_runtime_with_the_kernel():
    from edge_jax.papers.npumoe.runtime import LayerRuntime
    chunk, experts = _routed()
    want = LayerRuntime(PLAN, experts)(*chunk)
    assert rel_error(LayerRuntime(PLAN, experts, kernels="pallas")(*chunk), want) < 1e-5


@pytest.mark.parametrize("variant", ["tpu", "gpu"])
def test_decoder_logits_with_the_kernel(variant):
    """``variant`` gpu: the Triton kernels, wired in as on a GPU, run by the interpreter."""
    def model(kernels, strategy="npumoe"):
        plan = tiered_plan(LOAD, 24, 2, group=2, hot_fraction=0.75)  # 4 static groups + 2 fallback experts
        return DecoderLM(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                                     d_ff=32, moe_experts=8, moe_top_k=2, moe_d_ff=128,
                                     moe_exec=MoEExec(strategy, 24, "saliency", (plan,)), kernels=kernels))

    tokens = jax.random.randint(jax.random.key(0), (2, 20), 0, 64)  # 40 tokens: chunks of 24, the last padded
    params = jax.jit(model("xla", "dropless").init)(jax.random.key(1), tokens)["params"]
    params = {"params": jax.tree_util.tree_map(lambda a: a + 0.2 * jax.random.normal(jax.random.key(2), a.shape),
                                               params)}
    want = jax.jit(model("xla").apply)(params, tokens)
    with emulated(variant):
        jaxpr = str(jax.make_jaxpr(model("pallas").apply)(params, tokens))
        got = jax.jit(model("pallas").apply)(params, tokens)
    assert "pallas_call" in jaxpr and ("num_warps" in jaxpr) is (variant == "gpu")
    assert rel_error(got, want) < 1e-5


@requires_devices(4)
def test_on_a_mesh_each_device_runs_its_chunks():
    """4 devices (data 2 x fsdp 2), 4 prefill chunks: with the kernel every device runs its own chunk
    (one shard_map around the chunks, none nested inside) and the logits are the XLA path's."""
    from edge_jax.sharding import activation_sharding, make_mesh
    plan = tiered_plan(LOAD, 24, 2, group=2, hot_fraction=0.75)

    def model(kernels):
        return DecoderLM(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                                     d_ff=32, moe_experts=8, moe_top_k=2, moe_d_ff=128,
                                     moe_exec=MoEExec("npumoe", 24, "saliency", (plan,)), kernels=kernels))

    tokens = jax.random.randint(jax.random.key(3), (4, 24), 0, 64)  # 96 tokens: 4 chunks of 24
    params = jax.jit(model("xla").init)(jax.random.key(4), tokens)
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 1}, jax.devices()[:4])
    with activation_sharding(mesh):
        jaxpr = str(jax.make_jaxpr(model("pallas").apply)(params, tokens))
        got = jax.jit(model("pallas").apply)(params, tokens)
    assert jaxpr.count("shard_map") == 1 and "pallas_call" in jaxpr
    assert rel_error(got, jax.jit(model("xla").apply)(params, tokens)) < 1e-5
