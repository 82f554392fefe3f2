"""The kernel switch's platform facts: which variant a step takes for a GPU, which kernels ``auto`` picks
on each platform (those measured faster than XLA), and whole models with ``kernels=pallas`` lowered for CUDA
from this CPU (the Triton kernels inside them, per layer)."""
import logging

import jax
import jax.numpy as jnp
import pytest
from helpers import lower_for_gpu, on_gpu

from edge_jax.infer import decode as D
from edge_jax.layers.kernels import backend
from edge_jax.layers.moe.plan import MoEExec, tiered_plan
from edge_jax.models import DecoderLM, ModelConfig

OURS = sorted(backend.OURS)


def test_a_gpu_step_takes_the_triton_variants():
    """Outside any target a step takes the variant of the machine's backend (the TPU one interpreted on
    this CPU, the Triton one compiled on a GPU); inside ``targeting("gpu")`` the Triton one."""
    here_gpu = on_gpu() and backend.TRITON
    assert backend.gpu_variant() is here_gpu and jax.default_backend() in ("cpu", "gpu")
    with backend.targeting("gpu"):
        assert backend.gpu_variant() is backend.TRITON
        for kernel in OURS:
            assert backend.interpret(kernel) is (not backend.TRITON)
    with backend.emulating("gpu"):  # the tests' way on CPU: the GPU variants, interpreted
        assert backend.gpu_variant() is backend.TRITON and all(backend.interpret(k) for k in OURS)
    with backend.emulating("tpu"):  # the tests' way on a GPU: the TPU variants, interpreted
        assert not backend.gpu_variant() and all(backend.interpret(k) for k in OURS)
    assert backend.gpu_variant() is here_gpu and all(backend.interpret(k) is not here_gpu for k in OURS)


@pytest.mark.parametrize("target,picked", [
    ("gpu", {"mla_decode", "segment_attention", "flash"} if backend.TRITON else {"flash"}),  # H200: 1.27-13.92x
    ("tpu", {"flash"}),  # none of ours timed on a TPU yet
    ("cpu", set()),
])
def test_auto_picks_the_kernels_measured_faster_than_xla(target, picked):
    with backend.targeting(target):
        assert {k for k in [*OURS, "flash"] if backend.use_pallas("auto", k)} == picked
        assert all(backend.use_pallas("pallas", k) and not backend.use_pallas("xla", k) for k in [*OURS, "flash"])


def test_auto_says_in_one_line_why_it_keeps_xla(caplog):
    backend._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger=backend.__name__):
        with backend.targeting("gpu"):
            assert not backend.use_pallas("auto", "expert_ffn") and not backend.use_pallas("auto", "expert_ffn")
        with backend.targeting("cpu"):
            assert not backend.use_pallas("auto", "mla_decode")
    gpu_why = "not measured faster than the XLA path there" if backend.TRITON else "no native kernel there"
    assert [r.getMessage() for r in caplog.records] == [  # once per kernel and platform
        f"model.kernels=auto: expert_ffn keeps the XLA path on gpu ({gpu_why}); model.kernels=pallas forces the kernel",
        "model.kernels=auto: mla_decode keeps the XLA path on cpu (no native kernel there); model.kernels=pallas "
        "forces the kernel"]


MOE = ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
                  moe_experts=8, moe_top_k=2, moe_d_ff=128, kernels="pallas",
                  moe_exec=MoEExec("npumoe", 24, "saliency", (tiered_plan([40, 25, 12, 8, 6, 4, 3, 2], 24, 2, group=2,
                                                                           hot_fraction=0.75),)))
MLA = ModelConfig(vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=16, d_ff=128,
                  qk_norm=False, ffn="relu2", attention="mla", kv_lora_rank=24, d_rope=8, mla_absorb=True,
                  kernels="pallas")
EI = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
                 infini_hidden=8, infini_sink=4, infini_window=4, infini_segment=8, kernels="pallas")


def _triton_calls(text: str) -> int:
    return text.count(f"@{backend.TRITON_CALL}(")


@pytest.mark.gpu_compile
@pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")
@pytest.mark.parametrize("name,cfg,calls", [("npumoe", MOE, 2), ("edgeinfinite", EI, 2)])
def test_a_model_forward_lowers_for_cuda(name, cfg, calls):
    """NPUMoE: 4 static groups, each the two Triton calls of the expert FFN; EdgeInfinite: one
    segment-attention call per layer. ``calls`` is the least number expected."""
    model = DecoderLM(cfg)
    tokens = jax.ShapeDtypeStruct((2, 41), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((2, 41), jnp.int32))
    assert _triton_calls(lower_for_gpu(model.apply, params, tokens)) >= calls


@pytest.mark.gpu_compile
@pytest.mark.skipif(not backend.TRITON, reason="this JAX has no Pallas Triton backend")
def test_an_absorbed_mla_decode_step_lowers_for_cuda():
    model = DecoderLM(MLA)
    params = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((2, 3), jnp.int32))["params"]
    cache = jax.eval_shape(lambda: D.init_cache(model, 2, 64))
    text = lower_for_gpu(lambda p, c, t: D.forward_chunk(model, p, c, t, {}), params, cache,
                         jax.ShapeDtypeStruct((2, 1), jnp.int32))
    assert _triton_calls(text) == MLA.n_layers

