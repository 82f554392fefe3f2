"""``model.scan_layers`` and ``model.remat`` against the unrolled stack.

The reference pair is :func:`edge_jax.models.scan.stack_layers` / :func:`unstack_layers`: an unrolled
model's params, stacked, must make the scanned model compute the same logits, hidden states, MoE
losses, gradients and training losses; remat must not change losses or gradients.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import tiny_overrides
from helpers import slow_except

from edge_jax.config import ConfigError, load_config
from edge_jax.layers.token_memory.meki import FoldError, fold_meki
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.inference import inference_form
from edge_jax.models.inputs import apply_kwargs, host_inputs
from edge_jax.models.scan import REMAT_POLICIES, like_layout, stack_layers, unstack_layers
from edge_jax.train.init_from import merge_params
from edge_jax.train.optim import _matrices_only
from edge_jax.train.setup import build
from edge_jax.train.state import TrainState
from edge_jax.train.step import auxiliary_loss, make_train_step

BASE = ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
MODELS = {  # every kind of model whose layers are identical (scannable)
    "dense": {},
    "mla": dict(attention="mla", ffn="relu2", qk_norm=False, n_kv_heads=4, kv_lora_rank=16, d_rope=8),
    "meki": dict(memory="meki", d_mem=16),
    "meki_after_attn": dict(memory="meki", d_mem=16, meki_position="after_attn", meki_projection="linear"),
    "ple": dict(memory="ple", d_mem=8),
    "engram_everywhere": dict(memory="engram", d_mem=8, engram_layers=(0, 1), engram_table_size=31),
    "moe_everywhere": dict(moe_experts=4, moe_top_k=2, moe_d_ff=32, moe_aux_weight=0.01),
    "edgeinfinite": dict(infini_hidden=8, infini_sink=2, infini_window=4, infini_segment=8),
}
TOL = {"float32": 1e-5, "bfloat16": 2e-2}


def _cfg(name: str, **extra) -> ModelConfig:
    return dataclasses.replace(BASE, **MODELS[name], **extra)


def _tokens(batch=2, seq=16):
    return np.asarray(jax.random.randint(jax.random.key(0), (batch, seq), 1, BASE.vocab_size), np.int32)


def _init(cfg: ModelConfig, tokens):
    init = jax.jit(DecoderLM(cfg).init)
    return nn.unbox(init(jax.random.key(1), tokens, **apply_kwargs(host_inputs(cfg, tokens))))["params"]


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _max_rel(tree_a, tree_b) -> float:
    return max(jax.tree_util.tree_leaves(jax.tree_util.tree_map(_rel, tree_a, tree_b)))


def test_stack_unstack_round_trip_is_exact():
    tokens = _tokens()
    params = _init(_cfg("meki"), tokens)
    stacked = stack_layers(params, BASE.n_layers)
    assert "layers" in stacked and not any(k.startswith("layers_") for k in stacked)
    assert stacked["layers"]["attn"]["q_proj"]["kernel"].shape == (2,) + params["layers_0"]["attn"]["q_proj"][
        "kernel"].shape
    back = unstack_layers(stacked)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(params)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), back, params)
    # optimizer-state-shaped trees (optax NamedTuples holding param-shaped dicts) convert the same way
    opt = optax.adamw(1e-3).init(params)
    opt_back = unstack_layers(stack_layers(opt))
    assert jax.tree_util.tree_structure(opt_back) == jax.tree_util.tree_structure(opt)
    assert like_layout(params, stacked)["layers"]["ffn"]["up"]["kernel"].shape[0] == 2
    assert "layers_1" in like_layout(stacked, params)
    with pytest.raises(ValueError, match="layers_0 .. layers_2"):
        stack_layers(params, 3)


# one model of each layer structure in the fast tier (dense, MLA, MeKi's host tables, MoE); the variants
# of a memory that only move or swap its branch, and EdgeInfinite's segments, with -m slow
@pytest.mark.parametrize("name", slow_except(MODELS, ("dense", "mla", "meki", "moe_everywhere")))
def test_scanned_forward_matches_unrolled(name):
    cfg = _cfg(name)
    tokens = _tokens()
    extra = apply_kwargs(host_inputs(cfg, tokens))
    params = _init(cfg, tokens)
    scanned_cfg = dataclasses.replace(cfg, scan_layers=True)
    scanned_init = _init(scanned_cfg, tokens)
    stacked = stack_layers(params, cfg.n_layers)
    assert jax.tree_util.tree_structure(scanned_init) == jax.tree_util.tree_structure(stacked)
    assert jax.tree_util.tree_map(jnp.shape, scanned_init) == jax.tree_util.tree_map(jnp.shape, stacked)
    (want, hidden), aux = DecoderLM(cfg).apply({"params": params}, tokens, return_hidden=True, mutable=["losses"],
                                               **extra)
    (got, hidden_s), aux_s = DecoderLM(scanned_cfg).apply({"params": stacked}, tokens, return_hidden=True,
                                                          mutable=["losses"], **extra)
    assert _rel(got, want) < TOL["float32"]
    assert len(hidden_s) == cfg.n_layers and max(_rel(a, b) for a, b in zip(hidden_s, hidden)) < TOL["float32"]
    assert abs(float(auxiliary_loss(aux_s)) - float(auxiliary_loss(aux))) < 1e-6
    if cfg.moe_aux_weight:
        assert float(auxiliary_loss(aux)) > 0


def test_scanned_params_carry_the_layers_logical_axis():
    boxed = jax.jit(DecoderLM(_cfg("dense", scan_layers=True)).init)(jax.random.key(1), _tokens())["params"]
    kernel = boxed["layers"]["attn"]["q_proj"]["kernel"]
    assert kernel.names == ("layers", "embed", "heads", "head_dim") and kernel.value.shape[0] == BASE.n_layers
    from edge_jax.sharding import LOGICAL_RULES
    assert ("layers", None) in LOGICAL_RULES


def test_folded_meki_with_host_rows_matches_unrolled():
    """MeKi's per-layer host rows (``meki_rows`` [B, T, L, d_mem]) are scanned over, one slice per layer."""
    cfg = _cfg("meki")
    tokens = _tokens()
    params = _init(cfg, tokens)
    folded, folded_cfg = fold_meki(params, cfg)
    scanned_cfg = dataclasses.replace(cfg, scan_layers=True)
    folded_s, folded_cfg_s = inference_form(stack_layers(params), scanned_cfg)
    assert folded_cfg_s.scan_layers and folded_cfg_s.meki_folded
    with pytest.raises(FoldError, match="models.inference.inference_form"):
        fold_meki(stack_layers(params), scanned_cfg)
    rows = jnp.stack([folded[f"layers_{i}"]["meki"]["table"][tokens] for i in range(cfg.n_layers)], axis=2)
    want = DecoderLM(folded_cfg).apply({"params": folded}, tokens, host_inputs={"meki_rows": rows})
    got = DecoderLM(folded_cfg_s).apply({"params": folded_s}, tokens, host_inputs={"meki_rows": rows})
    assert _rel(got, want) < TOL["float32"]


def _loss_and_grads(cfg, params, tokens):
    def loss(p):
        logits = DecoderLM(cfg).apply({"params": p}, tokens[:, :-1])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]))
    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("dtype,scan", [("float32", False), pytest.param("bfloat16", True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("remat", [r for r in REMAT_POLICIES if r != "none"])
def test_remat_keeps_loss_and_gradients(remat, dtype, scan):
    cfg = _cfg("dense", dtype=dtype, scan_layers=scan)
    tokens = _tokens()
    params = _init(cfg, tokens)
    loss, grads = _loss_and_grads(cfg, params, tokens)
    loss_r, grads_r = _loss_and_grads(dataclasses.replace(cfg, remat=remat), params, tokens)
    assert _rel(loss_r, loss) < TOL[dtype] and _max_rel(grads_r, grads) < TOL[dtype]


def test_scanned_gradients_match_unrolled():
    cfg = _cfg("moe_everywhere")
    tokens = _tokens()
    params = _init(cfg, tokens)
    loss, grads = _loss_and_grads(cfg, params, tokens)
    loss_s, grads_s = _loss_and_grads(dataclasses.replace(cfg, scan_layers=True, remat="dots"),
                                      stack_layers(params), tokens)
    assert _rel(loss_s, loss) < TOL["float32"] and _max_rel(unstack_layers(grads_s), grads) < 1e-4


def _train_losses(config, params, batches):
    run = build(config)
    state = TrainState.create(apply_fn=run.model.apply, params=params, tx=run.tx)
    step = jax.jit(make_train_step(config.train.grad_accum, run.schedule))
    out = []
    for batch in batches:
        state, metrics = step(state, batch)
        out.append(float(metrics["loss"]))
    return out, state.params


@pytest.mark.parametrize("grad_accum", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_training_with_scan_matches_unrolled(tiny_config, grad_accum):
    """Three steps of the project's train step (AdamW with weight decay, which skips the norm scales
    in both layouts) from the same initial params, scanned and unrolled."""
    plain = tiny_config(**{"train.steps": 3, "train.grad_accum": grad_accum})
    scanned = tiny_config(**{"train.steps": 3, "train.grad_accum": grad_accum, "model.scan_layers": True,
                             "model.remat": "full"})
    run = build(plain)
    vocab, B, T = run.config.model.vocab_size, plain.data.batch_size, plain.data.seq_len
    tokens = np.asarray(jax.random.randint(jax.random.key(2), (3, B, T + 1), 0, vocab), np.int32)
    batches = [{"inputs": t[:, :-1], "targets": t[:, 1:]} for t in tokens]
    params = _init(run.model.cfg, batches[0]["inputs"])
    want, final = _train_losses(plain, params, batches)
    got, final_s = _train_losses(scanned, stack_layers(params), batches)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert _max_rel(unstack_layers(final_s), final) < 1e-4


def test_weight_decay_mask_ignores_the_layer_axis():
    params = _init(BASE, _tokens())
    stacked, plain = _matrices_only(stack_layers(params)), _matrices_only(params)
    assert stacked["layers"] == plain["layers_0"] and stacked["layers"]["attn_norm"]["scale"] is False
    assert {k: v for k, v in stacked.items() if k != "layers"} == {k: v for k, v in plain.items()
                                                                    if not k.startswith("layers_")}


def test_init_from_merges_across_layouts():
    params = _init(BASE, _tokens())
    stacked = stack_layers(params)
    merged = merge_params(stacked, params, "base")
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), merged, stacked)
    back = merge_params(params, stacked, "base")
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), back, params)


@pytest.mark.parametrize("overrides,match", [
    ({"model.memory": "engram", "model.d_mem": 8, "model.engram_layers": [1]},
     "model.scan_layers needs identical layers; model.engram_layers=[1] puts Engram in those layers only; "
     "set model.scan_layers=False"),
    ({"model.moe_experts": 4, "model.moe_layers": [0]}, "model.moe_layers=[0] makes only those layers MoE"),
])
def test_scan_on_differing_layers_is_a_one_line_error(overrides, match):
    with pytest.raises(ConfigError) as e:
        load_config("configs/lm.py:size=tiny", tiny_overrides(**{"model.scan_layers": True, **overrides}))
    assert match in str(e.value) and "\n" not in str(e.value)


def test_differing_moe_plans_refuse_scan():
    from edge_jax.layers.moe.plan import MoEExec, uniform_plan
    plans = (uniform_plan(4, 8, 1), uniform_plan(4, 16, 1))
    with pytest.raises(ConfigError, match="capacity plans differ"):
        dataclasses.replace(_cfg("moe_everywhere", scan_layers=True), moe_exec=MoEExec("uniform", plans=plans))
    same = dataclasses.replace(_cfg("moe_everywhere", scan_layers=True), moe_exec=MoEExec("uniform",
                                                                                        plans=plans[:1] * 2))
    assert same.scan_layers


def test_unknown_remat_is_a_one_line_error():
    with pytest.raises(ConfigError) as e:
        load_config("configs/lm.py:size=tiny", tiny_overrides(**{"model.remat": "bogus"}))
    assert str(e.value) == "unknown model.remat value 'bogus'; valid: none, full, dots"
    with pytest.raises(ConfigError, match="valid: none, full, dots"):
        dataclasses.replace(BASE, remat="bogus")


def test_decode_caches_under_scan_name_the_fix():
    cfg = _cfg("dense", scan_layers=True)
    tokens = _tokens()
    params = _init(cfg, tokens)
    with pytest.raises(ValueError, match="scan_layers=False"):
        DecoderLM(cfg).apply({"params": params}, tokens, attn_context=[{} for _ in range(cfg.n_layers)])
