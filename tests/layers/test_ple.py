"""PLE baseline (Gemma-3n per-layer embeddings): naive reference, axes, decoder end to end."""
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from helpers import perturbed, rms_ref

from edge_jax.layers.token_memory.ple import PLEBlock, PLEInputs
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.inputs import example_inputs, host_inputs
from edge_jax.train.loop import train_and_evaluate


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_ple_inputs_match_naive_reference():
    V, L, P, D, B, T = 37, 3, 5, 12, 2, 6
    k = jax.random.split(jax.random.key(0), 2)
    tokens = jax.random.randint(k[0], (B, T), 0, V)
    emb = jax.random.normal(k[1], (B, T, D))
    module = PLEInputs(V, L, P)
    params = perturbed(jax.jit(module.init)(jax.random.key(1), tokens, emb), 2)
    out = np.asarray(module.apply({"params": params}, tokens, emb))
    assert out.shape == (B, T, L, P)
    table, w = np.asarray(params["table"]), np.asarray(params["ctx_proj"]["kernel"])
    scale = np.asarray(params["ctx_norm"]["scale"])
    tok_np, emb_np = np.asarray(tokens), np.asarray(emb, np.float64)
    ref = np.zeros((B, T, L, P))
    for b in range(B):
        for t in range(T):
            row = table[tok_np[b, t]] * math.sqrt(P)
            ctx = emb_np[b, t] @ w / math.sqrt(D)
            for layer in range(L):
                c = rms_ref(ctx[layer * P:(layer + 1) * P], scale)
                ref[b, t, layer] = (row[layer * P:(layer + 1) * P] + c) / math.sqrt(2.0)
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_ple_block_matches_naive_reference():
    P, D, B, T = 6, 10, 2, 5
    k = jax.random.split(jax.random.key(3), 2)
    h = jax.random.normal(k[0], (B, T, D))
    ple = jax.random.normal(k[1], (B, T, P))
    module = PLEBlock(P)
    params = perturbed(jax.jit(module.init)(jax.random.key(4), h, ple), 5)
    out = np.asarray(module.apply({"params": params}, h, ple))
    wg, wp = np.asarray(params["gate"]["kernel"]), np.asarray(params["proj"]["kernel"])
    scale = np.asarray(params["out_norm"]["scale"])
    h_np, ple_np = np.asarray(h, np.float64), np.asarray(ple, np.float64)
    ref = np.zeros((B, T, D))
    for b in range(B):
        for t in range(T):
            gated = _gelu_tanh(h_np[b, t] @ wg) * ple_np[b, t]
            ref[b, t] = rms_ref(gated @ wp, scale)
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)
    assert set(params) == {"gate", "proj", "out_norm"}  # no biases


def _cfg(**kw):
    base = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=48,
                memory="ple", d_mem=8)
    return ModelConfig(**{**base, **kw})


def test_decoder_ple_params_axes_and_forward():
    cfg = _cfg()
    model = DecoderLM(cfg)
    assert host_inputs(cfg, np.zeros((1, 4), np.int32)) == {}
    variables = jax.jit(model.init)(jax.random.key(0), **example_inputs(cfg, 2, 8))
    boxed = variables["params"]
    table = boxed["ple_inputs"]["table"]
    assert table.names == ("vocab", "mem") and table.value.shape == (64, 3 * 8)
    assert boxed["ple_inputs"]["ctx_proj"]["kernel"].names == ("embed", "mem")
    assert boxed["ple_inputs"]["ctx_proj"]["kernel"].value.shape == (32, 24)
    for i in range(3):
        layer = boxed[f"layers_{i}"]["ple"]
        assert layer["gate"]["kernel"].names == ("embed", "mem")
        assert layer["proj"]["kernel"].names == ("mem", "embed")
    params = perturbed(variables, 1)
    tokens = jax.random.randint(jax.random.key(2), (2, 10), 0, 64)
    apply = jax.jit(model.apply)
    logits = apply({"params": params}, tokens)
    assert logits.shape == (2, 10, 64) and bool(jnp.all(jnp.isfinite(logits)))
    # causal: a later token changes no earlier logit
    changed = tokens.at[:, 6].set((tokens[:, 6] + 1) % 64)
    other = apply({"params": params}, changed)
    np.testing.assert_allclose(other[:, :6], logits[:, :6], atol=1e-5, rtol=0)
    assert float(jnp.max(jnp.abs(other[:, 6:] - logits[:, 6:]))) > 1e-4
    # the layer input really is used: zeroing the PLE table moves the logits
    zeroed = jax.tree_util.tree_map(lambda x: x, params)
    zeroed["ple_inputs"]["table"] = jnp.zeros_like(params["ple_inputs"]["table"])
    assert float(jnp.max(jnp.abs(apply({"params": zeroed}, tokens) - logits))) > 1e-4


def _train_losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


def test_ple_model_trains(tiny_config, tmp_path):
    wd = str(tmp_path / "ple")
    cfg = tiny_config(**{"model.memory": "ple", "model.d_mem": 8, "train.steps": 20, "train.lr": 1e-2,
                         "train.eval_every": 20, "train.ckpt_every": 20})
    result = train_and_evaluate(cfg, wd)
    curve = _train_losses(wd)
    assert np.mean([curve[s] for s in range(16, 21)]) < np.mean([curve[s] for s in range(1, 6)]) - 0.3
    assert math.isfinite(result["val_loss"])
