"""MLA absorbed decode: the Pallas kernel (interpreted here; the Triton variant compiled on a GPU) and the
XLA flash-decoding against the masked reference, against ``latent_attention``, in a model's decode, and
compiled for TPU."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    compile_for_tpu,
    emulated,
    kernel_tol,
    needs_extra,
    perturbed,
    triton_blocks_only,
)
from jax.sharding import PartitionSpec as P

from edge_jax.infer import decode as D
from edge_jax.layers.attention.mla import latent_attention, latent_decode
from edge_jax.layers.kernels.mla_decode import mla_decode, mla_decode_reference, mla_decode_xla
from edge_jax.models.decoder import DecoderLM, ModelConfig

H, C, R, K = 4, 128, 16, 32
SCALE = 1 / np.sqrt(K + R)


def _inputs(B, S, dtype, seed=0):
    ks = jax.random.split(jax.random.key(seed), 4)
    shapes = [(B, H, C), (B, H, R), (B, S, C), (B, S, R)]
    return [jax.random.normal(k, s, jnp.float32).astype(dtype) for k, s in zip(ks, shapes)]


def _rel(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return np.linalg.norm(got - want) / np.linalg.norm(want)


# (id, buffer slots S, length per row, kernel block_s, kernel splits, XLA split_s)
CASES = [
    ("full", 64, (64, 64), 16, 2, 16),
    ("partial_mid_block", 64, (37, 37), 16, 2, 24),   # 24 does not divide 64: the last piece slides back
    ("single_slot", 64, (1, 1), 16, 2, 16),
    ("rows_differ", 64, (64, 21), 16, 3, 32),        # 3 runs over 4 blocks; row 1 fills 2 of them
    ("ragged_buffer", 60, (60, 45), 16, 2, 16),      # the last block runs past the buffer
    ("one_block", 64, (50, 9), 64, 2, 64),           # splits capped at the single block
    ("one_run", 64, (40, 64), 8, 1, 8),              # 8-slot blocks, all in one sequential run
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("S,lengths,block_s,splits,split_s", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kernel_and_xla_match_reference(S, lengths, block_s, splits, split_s, dtype):
    triton_blocks_only(block_s)
    args = _inputs(len(lengths), S, jnp.dtype(dtype)) + [jnp.asarray(lengths, jnp.int32)]
    want = mla_decode_reference(*args, scale=SCALE)
    got = mla_decode(*args, scale=SCALE, block_s=block_s, splits=splits)
    xla = mla_decode_xla(*args, scale=SCALE, split_s=split_s)
    assert got.dtype == xla.dtype == want.dtype == jnp.dtype(dtype)
    assert _rel(got, want) < kernel_tol(dtype) and _rel(xla, want) < kernel_tol(dtype)


def test_slots_past_the_last_filled_block_are_not_read():
    """NaN from the end of the last filled block on (the kernel: each row's own; the XLA loop: the
    longest row's piece, its trip count is shared by the rows): a read of them would make the
    output NaN. The reference gets zeros there (its mask makes them irrelevant)."""
    B, S, bs = 2, 64, 16
    lengths = jnp.asarray([21, 40], jnp.int32)
    q, qr, lat, kr = _inputs(B, S, jnp.float32, seed=3)
    for end_B, run in ((-(-lengths // bs) * bs, functools.partial(mla_decode, block_s=bs, splits=2)),
                       (jnp.full((B,), 48), functools.partial(mla_decode_xla, split_s=bs))):
        past_BS1 = (jnp.arange(S)[None] >= end_B[:, None])[..., None]
        poisoned = [jnp.where(past_BS1, jnp.nan, a) for a in (lat, kr)]
        want = mla_decode_reference(q, qr, *[jnp.where(past_BS1, 0.0, a) for a in (lat, kr)], lengths, scale=SCALE)
        got = run(q, qr, *poisoned, lengths, scale=SCALE)
        assert np.isfinite(np.asarray(got)).all() and _rel(got, want) < kernel_tol("float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kernels", ["xla", "pallas"])
def test_latent_decode_matches_latent_attention(kernels, dtype):
    """With W_UK / W_UV around it: the same as latent_attention under the equivalent mask."""
    B, S, lengths = 2, 24, jnp.asarray([24, 7], jnp.int32)
    dt = jnp.dtype(dtype)
    ks = jax.random.split(jax.random.key(5), 6)
    qn, qr, lat, kr, wk, wv = (jax.random.normal(k, s, jnp.float32).astype(dt) for k, s in zip(ks, [
        (B, 1, H, K), (B, 1, H, R), (B, S, C), (B, S, R), (C, H, K), (C, H, K)]))
    mask_B1S = (jnp.arange(S)[None] < lengths[:, None])[:, None]
    want = latent_attention(qn, qr, lat, kr, wk, wv, mask_B1S)
    got = latent_decode(qn, qr, lat, kr, wk, wv, lengths, kernels)
    assert got.shape == want.shape == (B, 1, H, K)
    assert _rel(got, want) < kernel_tol(dtype)


def test_block_s_must_tile_the_sublanes():
    """The TPU variant's rule (on a GPU too, where the step is emulated for a TPU)."""
    args = _inputs(1, 64, jnp.float32) + [jnp.asarray([5], jnp.int32)]
    with emulated("tpu"), pytest.raises(ValueError, match="multiple of 8"):
        mla_decode(*args, scale=SCALE, block_s=12)


MODEL = ModelConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=128,
                    qk_norm=False, ffn="relu2", attention="mla", kv_lora_rank=24, d_rope=8, rope_theta=10_000.0,
                    mla_absorb=True)


@pytest.mark.parametrize("variant", ["tpu", "gpu"])
def test_model_decode_same_logits_with_pallas_and_xla(variant):
    """A tiny absorbed-MLA model: prefill 3 tokens, decode 4 through a 12-slot cache; a decode step
    calls the kernel once per layer, and its logits equal the XLA path's and the full forward pass's.
    ``variant`` gpu: the Triton kernel, wired in as on a GPU, run by the interpreter."""
    B, T = 2, 7
    tokens = jax.random.randint(jax.random.key(1), (B, T), 0, MODEL.vocab_size)
    params = perturbed(jax.jit(DecoderLM(MODEL).init)(jax.random.key(0), tokens), 0)
    full = np.asarray(jax.jit(DecoderLM(MODEL).apply)({"params": params}, tokens))
    logits = {}
    for kernels in ("xla", "pallas"):
        model = DecoderLM(dataclasses.replace(MODEL, kernels=kernels))
        with emulated(variant):
            cache = D.init_cache(model, B, 12)
            _, cache = D.prefill(model, params, cache, tokens[:, :3])
            step = str(jax.make_jaxpr(lambda c: D.forward_chunk(model, params, c, tokens[:, 3:4], {}))(cache))
            assert step.count("pallas_call") == (MODEL.n_layers if kernels == "pallas" else 0)
            assert ("num_warps" in step) is (kernels == "pallas" and variant == "gpu")
            steps = []
            for t in range(3, T):
                out, cache = D.decode_step(model, params, cache, tokens[:, t:t + 1])
                steps.append(np.asarray(out))
        logits[kernels] = np.stack(steps, 1)
    np.testing.assert_allclose(logits["pallas"], logits["xla"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(logits["pallas"], full[:, 3:], atol=1e-5, rtol=0)


@pytest.mark.tpu_compile
@needs_extra("libtpu")
def test_compiles_for_tpu_at_plm_shape():
    """PLM-1.8B's attention (16 heads, d_c 512, d_rope 64), 8K slots, bf16, batch 4 over v5e:2x2."""
    B, Hp, Cp, Rp, S = 4, 16, 512, 64, 8192
    bf = jnp.bfloat16
    fn = functools.partial(mla_decode, scale=1 / np.sqrt(128 + Rp), interpret=False)
    exe = compile_for_tpu(fn, [((B, Hp, Cp), bf), ((B, Hp, Rp), bf), ((B, S, Cp), bf), ((B, S, Rp), bf),
                               ((B,), jnp.int32)], (P("x"),) * 5, P("x"))
    mem = exe.memory_analysis()
    print(f"mla_decode v5e:2x2 per chip: arguments {mem.argument_size_in_bytes} B, output "
          f"{mem.output_size_in_bytes} B, temporaries {mem.temp_size_in_bytes} B")
    cache_bytes = S * (Cp + Rp) * 2  # one row per chip
    assert cache_bytes <= mem.argument_size_in_bytes < cache_bytes * 1.01
    assert mem.output_size_in_bytes == Hp * Cp * 2
    assert mem.temp_size_in_bytes < cache_bytes // 8  # nothing the size of the cache is materialised
