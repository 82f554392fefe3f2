"""The three Triton kernels compiled for an H100 and an H200 on this CPU machine: XLA's GPU compiler for a
deviceless card (edge_jax.compile.gpus) runs Triton's passes and ptxas, so a block that does not fit the
card's shared memory fails here, and with ``xla_gpu_fail_ptx_compilation_on_register_spilling`` so does one
that spills registers. Each kernel goes through its public entry under ``backend.targeting("gpu")``: the
GPU variant at the blocks ``model.kernels=pallas`` gets (the defaults), at the papers' shapes (the shapes of
the *_gpu lowering tests). Needs the ``cuda`` extra; each compile takes 0.4-2.5 s here (docs/kernels.md)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import needs_extra, slow_except

from edge_jax.compile import gpus
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.expert_ffn import expert_ffn
from edge_jax.layers.kernels.mla_decode import mla_decode
from edge_jax.layers.kernels.segment_attention import segment_attention

pytestmark = [pytest.mark.gpu_compile, needs_extra("jax_plugins.xla_cuda12"),
              pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")]
# H100 and H200 are one target to the compiler (sm_90, 227 KiB of shared memory a block, the same registers):
# the H200 cases repeat the H100's compile, so they run with -m slow
CARDS = slow_except(["h100", "h200"], ("h100",))
NO_SPILLS = {"xla_gpu_fail_ptx_compilation_on_register_spilling": True}
DEFAULT_OPT = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}
BF16, F32, I32 = "bfloat16", "float32", "int32"


def _ffn(G, C, D, F):  # PhiMoE's experts: d 4096, d_ff 6400
    return [((G, C, D), BF16), ((G, D, F), BF16), ((G, D, F), BF16), ((G, F, D), BF16), ((G,), I32)]


def _mla(B, S, H, C, R):  # PLM-1.8B's absorbed decode: 16 heads, d_c 512, d_rope 64
    return [((B, H, C), BF16), ((B, H, R), BF16), ((B, S, C), BF16), ((B, S, R), BF16), ((B,), I32)]


def _segments(B, N, L, H, G, K, S):  # EdgeInfinite on a Qwen3-4B-shaped base: 32 / 8 heads x 128, sink S
    return [((B * N, L, H, K), BF16), ((B * N, L, G, K), BF16), ((B * N, L, G, K), BF16), ((B, S, G, K), BF16),
            ((B, S, G, K), BF16), ((B * N, G, K, K), F32), ((B * N, G, K), F32)]


MLA_SCALE = float(1 / np.sqrt(512 // 4 + 64))


def ffn_call(**blocks):
    return lambda *a: expert_ffn(*a, interpret=False, **blocks)


def mla_call(**blocks):
    return lambda *a: mla_decode(*a, scale=MLA_SCALE, interpret=False, **blocks)


def segment_call(**blocks):
    return lambda *a: segment_attention(*a, interpret=False, **blocks)


# name -> (the kernel's public entry with the given blocks, argument shapes, its Triton calls)
CASES = {
    "expert_ffn_phimoe_4x128": (ffn_call, _ffn(4, 128, 4096, 6400), 2),
    "mla_decode_plm_32k": (mla_call, _mla(1, 32768, 16, 512, 64), 1),
    "segment_attention_qwen3_4b_4x2048": (segment_call, _segments(1, 4, 2048, 32, 8, 128, 300), 1),
    "segment_attention_qwen3_4b_remainder_4x200": (segment_call, _segments(4, 1, 200, 32, 8, 128, 300), 1),
}
SEGMENT_CASES = [name for name in CASES if name.startswith("segment_attention")]
# at its default blocks (bq 128, bk 64, 8 warps) the segment kernel needs more than 255 registers a thread
# on sm_90a and ptxas spills (24 bytes a thread); bq 64 x bk 64 compiles without spilling (docs/kernels.md)
SPILL_AT_DEFAULTS = set(SEGMENT_CASES)
FITTING_SEGMENT_BLOCKS = dict(block_q=64, block_k=64)


@functools.cache
def _device(card: str):
    return gpus.devices(card)[0]


def _compile(fn, shapes, card: str, options=None):
    """``fn`` compiled for ``card`` (one deviceless GPU) with the kernels' GPU variants, at XLA's default
    optimization level (the suite compiles at -O0, tests/conftest.py; ptxas at -O0 spills where it does not)."""
    options = {**DEFAULT_OPT, **(options or {})}
    sharding = jax.sharding.SingleDeviceSharding(_device(card))
    structs = [jax.ShapeDtypeStruct(s, jnp.dtype(d), sharding=sharding) for s, d in shapes]
    with backend.targeting("gpu"):
        return jax.jit(fn).lower(*structs).compile(compiler_options=options)


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("name", list(CASES))
def test_compiles_at_default_blocks(name, card):
    """Triton's passes and ptxas accept the kernel: its blocks fit the card's shared memory, and (but for
    the known spill) its registers."""
    call, shapes, calls = CASES[name]
    compiled = _compile(call(), shapes, card, None if name in SPILL_AT_DEFAULTS else NO_SPILLS)
    assert compiled.memory_analysis() is not None
    assert compiled.as_text().count(f'custom_call_target="{backend.TRITON_CALL}"') == calls


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("name", SEGMENT_CASES)
def test_segment_attention_spills_at_default_blocks_not_at_64x64(name, card):
    """The known register spill of the segment kernel's defaults, and blocks that fit. When the defaults
    stop spilling this fails: drop them from SPILL_AT_DEFAULTS."""
    call, shapes, _ = CASES[name]
    with pytest.raises(jax.errors.JaxRuntimeError, match="register spilling"):
        _compile(call(), shapes, card, NO_SPILLS)
    assert _compile(call(**FITTING_SEGMENT_BLOCKS), shapes, card, NO_SPILLS).memory_analysis() is not None


# blocks past Hopper's 227 KiB of shared memory a block: (case, blocks, the bytes Triton asks for)
TOO_BIG = {
    "expert_ffn": ("expert_ffn_phimoe_4x128", dict(block_c=128, block_f=512, block_r=256), 655360),
    "mla_decode": ("mla_decode_plm_32k", dict(block_s=256), 321536),
    "segment_attention": ("segment_attention_qwen3_4b_4x2048", dict(block_q=128, block_k=256), 425984),
}


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("kernel", list(TOO_BIG))
def test_blocks_past_shared_memory_do_not_compile(kernel, card):
    name, blocks, requested = TOO_BIG[kernel]
    call, shapes, _ = CASES[name]
    available = gpus.CARDS[card].smem_optin
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=f"Shared memory size limit exceeded: requested {requested}, available: {available}"):
        _compile(call(**blocks), shapes, card)
