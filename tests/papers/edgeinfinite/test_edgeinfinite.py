"""EdgeInfinite: memory functions against their loop references, exactness on short inputs, Algorithm 1's prefill
against the parallel segmented forward, decode against prefill, gate-only training."""
import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import perturbed, random_decoder_params

from edge_jax.layers.infini.compressive import (
    feature_map,
    memory_readout,
    memory_readout_reference,
    memory_update,
    memory_update_reference,
    segment_layout,
)
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.papers.edgeinfinite.inference import EdgeInfiniteSession
from edge_jax.train.optim import make_optimizer, param_labels, trained_count

BASE = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
INFINI = dataclasses.replace(BASE, infini_hidden=8, infini_sink=4, infini_window=4, infini_segment=8,
                             infini_gate_init=0.5)


@functools.cache
def _jitted(cfg):
    """``(init, apply)`` of ``DecoderLM(cfg)``, jitted: one compile per shape, where the model run op by op
    (eagerly) compiles every op again for each new sequence length (minutes on a loaded machine)."""
    model = DecoderLM(cfg)
    return jax.jit(model.init), jax.jit(model.apply)


def _apply(cfg, params, tokens):
    return _jitted(cfg)[1]({"params": params}, tokens)


def _params(cfg, seed=0):
    tokens = np.zeros((1, 8), np.int32)
    params = nn.unbox(_jitted(cfg)[0](jax.random.key(seed), tokens)["params"])
    return perturbed(params, seed + 1)


def _tokens(T, B=2, seed=1):
    return np.asarray(jax.random.randint(jax.random.key(seed), (B, T), 0, 64))


@pytest.mark.parametrize("rule", ["linear", "delta"])
def test_memory_update_and_readout_match_loops(rule):
    rng = np.random.default_rng(0)
    B, T, G, K, H = 2, 5, 2, 4, 4
    k, v = jnp.asarray(rng.normal(size=(B, T, G, K))), jnp.asarray(rng.normal(size=(B, T, G, K)))
    M0 = jnp.asarray(rng.normal(size=(B, G, K, K)) * 0.1, jnp.float32)
    z0 = jnp.asarray(np.abs(rng.normal(size=(B, G, K))) + 1.0, jnp.float32)
    valid = jnp.asarray(rng.random((B, T)) < 0.7)
    for mask in (None, valid):  # every token, and some tokens padding
        M, z = memory_update(M0, z0, k, v, mask, rule=rule)
        want_M, want_z = memory_update_reference(M0, z0, k, v, mask, rule=rule)
        np.testing.assert_allclose(np.asarray(M), np.asarray(want_M), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(z), np.asarray(want_z), rtol=1e-5, atol=1e-5)
    q = jnp.asarray(rng.normal(size=(B, T, H, K)))
    np.testing.assert_allclose(np.asarray(memory_readout(q, M, z)), np.asarray(memory_readout_reference(q, M, z)),
                               rtol=1e-4, atol=1e-5)
    assert float(feature_map(jnp.asarray(-30.0))) > 0


def test_empty_memory_reads_zero():
    q = jnp.ones((1, 3, 2, 4))
    out = memory_readout(q, jnp.zeros((1, 2, 4, 4)), jnp.zeros((1, 2, 4)))
    assert np.all(np.asarray(out) == 0)


def test_segment_layout():
    assert segment_layout(15, 4, 4, 8) is None                      # shorter than sink + window + segment
    lay = segment_layout(41, 4, 4, 8)
    assert (lay.n_segments, lay.remaining) == (4, 5)
    assert list(np.asarray(lay.local_positions())[:14]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 4, 5]
    assert segment_layout(12, 4, 0, 8) is None                      # window 0 still keeps one token
    lay = segment_layout(13, 4, 0, 8)
    assert (lay.n_segments, lay.remaining) == (1, 1)


def test_short_input_is_the_base_model_bit_for_bit():
    params = _params(INFINI)
    base_params = jax.tree_util.tree_map(lambda x: x, params)
    for layer in range(BASE.n_layers):
        del base_params[f"layers_{layer}"]["attn"]["memory_gate"]
    tokens = _tokens(15)  # sink + window + segment - 1
    a = _apply(BASE, base_params, tokens)
    b = _apply(INFINI, params, tokens)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    c = _apply(INFINI, params, _tokens(16))  # long enough: the memory path
    d = _apply(BASE, base_params, _tokens(16))
    assert not np.allclose(np.asarray(c), np.asarray(d))


@pytest.mark.parametrize("update", ["linear", "delta"])
def test_algorithm1_prefill_matches_the_segmented_forward(update):
    cfg = dataclasses.replace(INFINI, infini_update=update)
    model, params = DecoderLM(cfg), _params(cfg)
    session = EdgeInfiniteSession(model, params)
    tokens = _tokens(60)
    for T in (5, 15, 16, 17, 30, 41, 60):
        want = np.asarray(_apply(cfg, params, tokens[:, :T]))[:, -1]
        got = np.asarray(session.prefill(tokens[:, :T]))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
        assert session.cache_tokens() <= session.capacity
    assert session.compressed_segments == 6


@pytest.mark.parametrize("keep_sink,keep_window", [(True, True), (False, True), (True, False), (False, False)])
def test_decode_matches_prefill(keep_sink, keep_window):
    cfg = dataclasses.replace(INFINI, infini_keep_sink=keep_sink, infini_keep_window=keep_window)
    model, params = DecoderLM(cfg), _params(cfg)
    tokens = _tokens(48)
    session = EdgeInfiniteSession(model, params)
    session.prefill(tokens[:, :10])
    for t in range(10, 48):
        got = np.asarray(session.step(tokens[:, t:t + 1]))
        want = np.asarray(EdgeInfiniteSession(model, params).prefill(tokens[:, :t + 1]))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    assert session.compressed_segments >= 3
    assert session.cache_tokens() <= session.capacity


def test_gate_only_optimizer_moves_only_the_gate():
    from edge_jax.config import base_config
    params = _params(INFINI)
    gate, g_lr = ".*memory_gate.*", ".*memory_gate/g=10.0"  # old trainable=memory_gate, gate_lr=10 x lr
    labels = jax.tree_util.tree_leaves(param_labels(params, gate, (g_lr,)))
    assert labels.count("lr0") == INFINI.n_layers and labels.count("train") == 4 * INFINI.n_layers
    trained, total = trained_count(params, gate)
    gate_sizes = sum(int(np.prod(x.shape)) for layer in range(INFINI.n_layers)
                     for x in jax.tree_util.tree_leaves(params[f"layers_{layer}"]["attn"]["memory_gate"]))
    assert trained == gate_sizes and 0 < trained < total
    t = base_config().train
    t.update(trainable=gate, lr_multipliers=(g_lr,), lr=1e-2, warmup_steps=0, steps=10)
    tx, _ = make_optimizer(t)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    flat = jax.tree_util.tree_flatten_with_path(updates)[0]
    for path, u in flat:
        names = [str(getattr(k, "key", k)) for k in path]
        moved = bool(np.any(np.asarray(u) != 0))
        assert moved == ("memory_gate" in names), names
    g = [np.abs(np.asarray(u)).max() for path, u in flat if str(getattr(path[-1], "key", "")) == "g"]
    w = [np.abs(np.asarray(u)).max() for path, u in flat if str(getattr(path[-1], "key", "")) == "w1"]
    assert min(g) > 5 * max(w)  # the gate's own, larger learning rate


def test_merge_params_copies_the_base_and_names_mismatches():
    from edge_jax.config import ConfigError
    from edge_jax.train.init_from import merge_params
    target, base = random_decoder_params(INFINI), random_decoder_params(BASE, seed=5)
    gate = ".*memory_gate.*"
    with pytest.raises(ConfigError, match="lacks param layers_0/attn/memory_gate/.*train.trainable='.[*]'"):
        merge_params(target, base, "BASE")  # new params only where the base is frozen around them
    with pytest.raises(ConfigError, match="lacks param layers_0/attn/memory_gate/"):
        merge_params(target, base, "BASE", trainable=".*memory_gate/g")  # the rest of the gate must train too
    merged = merge_params(target, base, "BASE", trainable=gate)
    np.testing.assert_array_equal(np.asarray(merged["layers_0"]["attn"]["q_proj"]["kernel"]),
                                  np.asarray(base["layers_0"]["attn"]["q_proj"]["kernel"]))
    np.testing.assert_array_equal(np.asarray(merged["layers_0"]["attn"]["memory_gate"]["w1"]),
                                  np.asarray(target["layers_0"]["attn"]["memory_gate"]["w1"]))
    wider = random_decoder_params(dataclasses.replace(BASE, d_ff=96))
    with pytest.raises(ConfigError, match="ffn/down/kernel has shape"):
        merge_params(target, wider, "BASE", trainable=gate)
    with pytest.raises(ConfigError, match="lacks param"):
        merge_params(random_decoder_params(dataclasses.replace(INFINI, n_layers=3)), base, "BASE", trainable=gate)
    with pytest.raises(ConfigError, match="that this model lacks"):
        merge_params(random_decoder_params(dataclasses.replace(BASE, n_layers=1)), base, "BASE")


@pytest.mark.parametrize("overrides,message", [
    ({"model.infini_window": 200}, "shorter than model.infini_window"),
    ({"longctx.method": "streamingllm", "longctx.sink": 192}, r"longctx.sink=192 must lie in \[0, longctx.budget=192"),
    ({"longctx.method": "snapkv", "longctx.budget": 0}, r"longctx.obs_window=8 must lie in \[1, longctx.budget=0\)"),
    ({"longctx.method": "pyramidkv", "longctx.pool_kernel": 4}, "longctx.pool_kernel=4 must be a positive odd"),
    ({"model.attention": "mla", "model.kv_lora_rank": 16, "model.d_rope": 8, "model.qk_norm": False},
     "needs model.attention=gqa"),
    ({"init_from": ""}, "trains EdgeInfinite's gate on a frozen base"),
    ({"longctx.lengths": (1024, 99999)}, "longctx.max_input"),
    ({"model.infini_update": "hebbian"}, "unknown model.infini_update"),
])
def test_config_errors_are_one_line(overrides, message):
    from edge_jax.config import ConfigError, load_config
    with pytest.raises(ConfigError, match=message) as err:
        load_config("configs/edgeinfinite.py", {"init_from": "/base", **overrides})
    assert "\n" not in str(err.value)


def test_input_past_the_hard_limit_is_refused():
    from edge_jax.config import ConfigError, load_config
    from edge_jax.data import get_tokenizer
    from edge_jax.infer.longctx import evaluate_longctx
    config = load_config("configs/edgeinfinite.py", {"init_from": "/base", "longctx.lengths": (1024,),
                                                      "longctx.near_lengths": (), "longctx.max_input": 1024,
                                                      "longctx.examples": 1})
    config.longctx.max_input = 900  # below the prompts (validation would refuse it up front)
    model = DecoderLM(dataclasses.replace(INFINI, vocab_size=320))
    with pytest.raises(ConfigError, match="exceeds longctx.max_input=900"):
        evaluate_longctx(model, random_decoder_params(model.cfg), get_tokenizer("byte", "longctx"), config,
                         log=lambda m: None)


def test_paper_size_gate_step_shards_and_traces_abstractly():
    """Qwen3-4B shape with the paper's sink 300 / window 200 / segment 2048: one gate-only step traces
    on a 4 x 2 mesh over a 2,648-token sequence (one compressed segment); the gate is ~0.15%."""
    from edge_jax.config import load_config
    from edge_jax.sharding import make_mesh
    from edge_jax.train.state import abstract_train_state
    from edge_jax.train.step import make_train_step
    cfg = load_config("configs/edgeinfinite.py:size=paper", {"init_from": "/base", "mesh.data": 1, "mesh.fsdp": 4,
                                                               "mesh.tensor": 2, "data.batch_size": 8})
    model = DecoderLM(ModelConfig.from_config(cfg.model))
    tx, schedule = make_optimizer(cfg.train)
    abstract, _ = abstract_train_state(model, tx, make_mesh(cfg.mesh, jax.devices()[:8]))
    trained, total = trained_count(abstract.params, cfg.train.trainable)
    assert 0.0010 < trained / total < 0.0020
    seq = 300 + 200 + 2048 + 100
    batch = {k: jax.ShapeDtypeStruct((8, seq), jnp.int32) for k in ("inputs", "targets")}
    new_state, metrics = jax.eval_shape(make_train_step(1, schedule), abstract, batch)
    assert metrics["loss"].shape == () and new_state.params["layers_0"]["attn"]["memory_gate"]["g"].shape == (32,)


@pytest.mark.timeout(600)  # three runs: ~4 min on a loaded 2-core machine
def test_gate_trains_on_a_frozen_base_end_to_end(tiny_config, tmp_path):
    """Base run -> init_from -> gate-only training over segmented windows -> long-context evaluation;
    then a baseline evaluates the base with train.steps=0."""
    from conftest import tiny_overrides

    from edge_jax.config import load_config
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.loop import train_and_evaluate
    base_wd, gate_wd = str(tmp_path / "base"), str(tmp_path / "gate")
    sizes = {"model.infini_sink": 4, "model.infini_window": 4, "model.infini_segment": 8}
    train_and_evaluate(tiny_config(**{"train.steps": 4, **sizes}), base_wd)
    evaluation = {"longctx.lengths": (256,), "longctx.examples": 1, "longctx.tasks": ("passkey",),
                  "longctx.answer_tokens": 2}
    gate = load_config("configs/lm.py:size=tiny", tiny_overrides(**{
        **sizes, **evaluation, "model.infini_hidden": 8, "data.seq_len": 40, "train.steps": 3,
        "train.trainable": ".*memory_gate.*", "train.lr_multipliers": (f".*memory_gate/g={0.05 / 3e-3}",),
        "init_from": base_wd,
        "longctx.method": "edgeinfinite"}))
    result = train_and_evaluate(gate, gate_wd)
    assert 0 < result["trained_fraction"] < 0.1 and result["longctx/prompts"] == 1
    assert 0 <= result["longctx/answer_nll"] < 50
    before, after = restore_params(base_wd)[0], restore_params(gate_wd)[0]
    np.testing.assert_array_equal(np.asarray(after["layers_1"]["ffn"]["up"]["kernel"]),
                                  np.asarray(before["layers_1"]["ffn"]["up"]["kernel"]))
    assert np.abs(np.asarray(after["layers_0"]["attn"]["memory_gate"]["g"])).max() > 0  # the gate moved (init 0)
    baseline = load_config("configs/lm.py:size=tiny", tiny_overrides(**{
        **sizes, **evaluation, "train.steps": 0, "init_from": base_wd, "longctx.method": "snapkv",
        "longctx.budget": 16, "longctx.obs_window": 4}))
    assert train_and_evaluate(baseline, str(tmp_path / "snap"))["longctx/prompts"] == 1
