"""MeKi layer: equations, switches, and train-form vs folded equivalence for every combination."""
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.errors import ConfigError
from edge_jax.layers.norms import rms_normalize
from edge_jax.layers.token_memory.meki import FUSIONS, POSITIONS, PROJECTIONS, FoldError, MeKi, fold_meki, fold_table
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.inference import InferenceFormError, inference_config, inference_form

MEMORIES = [(True, True), (True, False), (False, True)]  # (static, dynamic): Table 3 rows


def _cfg(**kw):
    base = dict(vocab_size=80, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=48,
                memory="meki", d_mem=8, init_std=0.2)
    return ModelConfig(**{**base, **kw})


def _random_params(model, seed=0):
    """Init, then perturb every leaf (alpha/beta/norm scales too) so nothing sits at 0 or 1."""
    return perturbed(jax.jit(model.init)(jax.random.key(seed), jnp.zeros((1, 8), jnp.int32)), seed + 1)


def _tokens(cfg, seed=2, shape=(2, 12)):
    return jax.random.randint(jax.random.key(seed), shape, 1, cfg.vocab_size)


BRANCH_COMBOS = list(itertools.product(MEMORIES, PROJECTIONS.names(), FUSIONS.names()))


@pytest.mark.parametrize("memories,projection,fusion", BRANCH_COMBOS)
def test_folded_branch_matches_training_branch(memories, projection, fusion):
    """Every combination of the switches the fold depends on, on the MeKi branch alone."""
    (static, dynamic), V, D, M = memories, 70, 24, 8
    train = MeKi(V, M, static, dynamic, projection, fusion, init_std=0.3)
    k = jax.random.split(jax.random.key(4), 3)
    h = jax.random.normal(k[0], (2, 9, D))
    tokens = jax.random.randint(k[1], (2, 9), 0, V)
    embedding = jax.random.normal(k[2], (V, D))
    with jax.disable_jit():
        p = _random_params_module(train, h, tokens, embedding[tokens])
        cfg = _cfg(vocab_size=V, d_model=D, d_mem=M, meki_static=static, meki_dynamic=dynamic,
                   meki_projection=projection, meki_fusion=fusion)
        folded = {k: v for k, v in p.items() if k != "expert"}
        folded["table"] = fold_table(cfg, p["expert"], embedding)
        want = train.apply({"params": p}, h, tokens, embedding[tokens])
        got = MeKi(V, M, static, dynamic, projection, fusion, folded=True).apply({"params": folded}, h, tokens)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert float(jnp.std(want)) > 0.1


FULL_COMBOS = list(itertools.product(MEMORIES, PROJECTIONS.names(), FUSIONS.names(), POSITIONS.names()))
FAST_COMBOS = [((True, True), "swiglu", "add_sigmoid", pos) for pos in POSITIONS.names()] + [
    ((True, False), "linear", "mul_silu", "after_ffn"), ((False, True), "swiglu", "add_silu", "parallel_attn")]


def _fold_case(memories, projection, fusion, position):
    static, dynamic = memories
    cfg = _cfg(meki_static=static, meki_dynamic=dynamic, meki_projection=projection, meki_fusion=fusion,
               meki_position=position)
    with jax.disable_jit():  # tiny shapes: eager beats compiling 96 variants
        params = _random_params(DecoderLM(cfg))
        before = jax.tree_util.tree_map(np.array, params)
        folded, folded_cfg = fold_meki(params, cfg)
        tokens = _tokens(cfg)
        train_logits = jax.jit(DecoderLM(cfg).apply)({"params": params}, tokens)
        fold_logits = jax.jit(DecoderLM(folded_cfg).apply)({"params": folded}, tokens)
    np.testing.assert_allclose(fold_logits, train_logits, atol=1e-5, rtol=0)
    assert float(jnp.std(train_logits)) > 0.1  # the comparison is not between constants
    # pure: the input tree is untouched and keeps its training-form structure
    jax.tree_util.tree_map(np.testing.assert_array_equal, params, before)
    assert "expert" in params["layers_0"]["meki"] and "table" not in params["layers_0"]["meki"]
    assert set(folded["layers_0"]["meki"]) == {"table", "gate", "out", "out_norm"}
    assert folded_cfg.meki_folded and not cfg.meki_folded


@pytest.mark.parametrize("memories,projection,fusion,position", FAST_COMBOS)
def test_fold_matches_training_form(memories, projection, fusion, position):
    """Whole model, every position; with the branch test above this covers every switch."""
    _fold_case(memories, projection, fusion, position)


@pytest.mark.slow
@pytest.mark.parametrize("memories,projection,fusion,position", FULL_COMBOS)
def test_fold_matches_training_form_full_product(memories, projection, fusion, position):
    _fold_case(memories, projection, fusion, position)


def test_folding_twice_or_non_meki_is_refused():
    cfg = _cfg()
    params = _random_params(DecoderLM(cfg))
    folded, folded_cfg = fold_meki(params, cfg)
    with pytest.raises(FoldError, match="already folded"):
        fold_meki(folded, cfg)
    with pytest.raises(FoldError, match="already folded"):
        fold_meki(folded, folded_cfg)
    with pytest.raises(FoldError, match="no MeKi memory"):
        fold_meki(params, _cfg(memory="none"))
    with pytest.raises(InferenceFormError, match="already folded"):  # the generic entry raises the same
        inference_form(folded, cfg)


def test_meki_registers_its_fold_as_the_inference_form():
    """edge_jax.models.inference reaches the fold through MeKi's MemoryKind; other kinds are their own form."""
    cfg = _cfg()
    params = _random_params(DecoderLM(cfg))
    folded, folded_cfg = inference_form(params, cfg)
    want, want_cfg = fold_meki(params, cfg)
    jax.tree_util.tree_map(np.testing.assert_array_equal, folded, want)
    assert folded_cfg == want_cfg == inference_config(cfg) and folded_cfg.meki_folded
    dense = _cfg(memory="none")
    assert inference_form(params, dense) == (params, dense) and inference_config(dense) is dense


def test_branch_follows_the_equations():
    """Eqs. 1-6 written out by hand from the module's parameters."""
    V, D, M = 50, 16, 6
    module = MeKi(V, M, fusion="add_sigmoid", init_std=0.3)
    k = jax.random.split(jax.random.key(3), 3)
    h = jax.random.normal(k[0], (2, 5, D))
    tokens = jax.random.randint(k[1], (2, 5), 0, V)
    emb = jax.random.normal(k[2], (2, 5, D))
    p = _random_params_module(module, h, tokens, emb)
    e_p = p["expert"]
    dyn = (nn.silu(emb @ e_p["proj_gate"]["kernel"]) * (emb @ e_p["proj_up"]["kernel"])) @ e_p["proj_down"]["kernel"]
    m = e_p["memory"][tokens] + e_p["beta"] * dyn
    e = e_p["alpha"] * rms_normalize(m, 1e-6) * e_p["norm"]["scale"]
    v = e + jax.nn.sigmoid(h @ p["gate"]["kernel"])
    y = rms_normalize(v @ p["out"]["kernel"], 1e-6) * p["out_norm"]["scale"]
    np.testing.assert_allclose(module.apply({"params": p}, h, tokens, emb), y, atol=1e-5, rtol=1e-5)


def _random_params_module(module, *args):
    return perturbed(module.init(jax.random.key(0), *args), 9)


def test_alpha_beta_start_at_one_and_tables_carry_vocab_axis():
    cfg = _cfg()
    boxed = jax.jit(DecoderLM(cfg).init)(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    expert = boxed["layers_0"]["meki"]["expert"]
    assert float(nn.unbox(expert["alpha"])) == 1.0 and float(nn.unbox(expert["beta"])) == 1.0
    assert expert["memory"].names == ("vocab", "mem")
    folded_cfg = fold_meki(nn.unbox(boxed), cfg)[1]
    fboxed = jax.jit(DecoderLM(folded_cfg).init)(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    assert fboxed["layers_0"]["meki"]["table"].names == ("vocab", "mem")


def test_host_rows_match_table_lookup():
    cfg = _cfg()
    folded, fcfg = fold_meki(_random_params(DecoderLM(cfg)), cfg)
    tokens = _tokens(cfg)
    rows = jnp.stack([folded[f"layers_{i}"]["meki"]["table"][tokens] for i in range(cfg.n_layers)], axis=2)
    a = DecoderLM(fcfg).apply({"params": folded}, tokens)
    b = DecoderLM(fcfg).apply({"params": folded}, tokens, host_inputs={"meki_rows": rows})
    np.testing.assert_allclose(a, b, atol=1e-6)
    with pytest.raises(ValueError, match="folded MeKi"):
        DecoderLM(cfg).apply({"params": _random_params(DecoderLM(cfg))}, tokens, host_inputs={"meki_rows": rows})
    with pytest.raises(ValueError, match="host input 'ngram_ids' is not an input of model.memory='meki'"):
        DecoderLM(fcfg).apply({"params": folded}, tokens, host_inputs={"ngram_ids": rows})


def test_a_new_fusion_is_one_function_and_one_registration():
    """Registering a fusion is all it takes: the config accepts it, the model runs it, folding keeps it."""
    from edge_jax.config import load_config
    with FUSIONS.override("test_add_tanh", lambda e, gate: e + jnp.tanh(gate)):
        load_config("configs/meki.py", {"model.meki_fusion": "test_add_tanh"})
        cfg = _cfg(meki_fusion="test_add_tanh")
        params = _random_params(DecoderLM(cfg))
        tokens = _tokens(cfg)
        folded, fcfg = fold_meki(params, cfg)
        want = jax.jit(DecoderLM(cfg).apply)({"params": params}, tokens)
        got = jax.jit(DecoderLM(fcfg).apply)({"params": folded}, tokens)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
        assert not np.allclose(DecoderLM(_cfg(meki_fusion="add_sigmoid")).apply({"params": params}, tokens), want)
    with pytest.raises(ConfigError, match="unknown model.meki_fusion value 'test_add_tanh'"):  # for this test only
        load_config("configs/meki.py", {"model.meki_fusion": "test_add_tanh"})
