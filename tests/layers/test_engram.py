"""Engram baseline: host n-gram hashing, the module against a naive reference, causality, decoder."""
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import perturbed, rms_ref

from edge_jax.layers.token_memory import ngram_hash
from edge_jax.layers.token_memory.engram import Engram
from edge_jax.layers.token_memory.ngram_hash import engram_table_sizes, ngram_hash_ids
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.inputs import example_inputs, host_inputs, host_shapes
from edge_jax.train.loop import train_and_evaluate

ORDERS, HEADS, SIZE = (2, 3), 3, 101


def _is_prime(n):
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def test_table_sizes_are_distinct_primes_in_order():
    sizes = engram_table_sizes((2, 3), 4, 4099)
    assert len(sizes) == 8 and len(set(sizes)) == 8 and all(_is_prime(p) and p >= 4099 for p in sizes)
    assert list(sizes) == sorted(sizes) and sizes[0] == 4099  # 4099 is prime
    assert engram_table_sizes([2, 3], 4, 4099) == sizes  # lists accepted
    assert list(ngram_hash.table_offsets(sizes)) == [sum(sizes[:i]) for i in range(8)]
    # matched ROM: 4 layers x 4096 tokens x d_mem == one Engram layer's sum(sizes) x d_mem, within 2%
    size = ngram_hash.matched_table_size(4, 4096, 1, (2, 3), 4)
    assert size == 2048 and abs(sum(engram_table_sizes((2, 3), 4, size)) / (4 * 4096) - 1) < 0.02


def _reference_ids(tokens, orders, heads, size, seed):
    """Pure-Python big ints: the documented formula, one position at a time."""
    sizes = engram_table_sizes(orders, heads, size)
    mult = ngram_hash.hash_multipliers(orders, heads, seed)
    B, T = tokens.shape
    out = np.zeros((B, T, len(sizes)), np.int64)
    for b in range(B):
        for t in range(T):
            for i, n in enumerate(orders):
                for j in range(heads):
                    mix = 0
                    for k in range(n):
                        v = int(tokens[b, t - k]) if t - k >= 0 else ngram_hash.PAD_VALUE
                        mix ^= (v * int(mult[i, j, k])) % 2 ** 64
                    col = i * heads + j
                    out[b, t, col] = (mix & (2 ** 63 - 1)) % sizes[col] + sum(sizes[:col])
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_hash_matches_big_int_reference_and_is_in_range(seed):
    tokens = np.random.default_rng(seed).integers(0, 50_000, (3, 9))
    ids = ngram_hash_ids(tokens, ORDERS, HEADS, SIZE, seed=seed)
    assert ids.dtype == np.int32 and ids.shape == (3, 9, len(ORDERS) * HEADS)
    np.testing.assert_array_equal(ids, _reference_ids(tokens, ORDERS, HEADS, SIZE, seed))
    sizes = engram_table_sizes(ORDERS, HEADS, SIZE)
    offsets = ngram_hash.table_offsets(sizes)
    assert np.all(ids >= offsets) and np.all(ids < offsets + np.asarray(sizes))
    np.testing.assert_array_equal(ids, ngram_hash_ids(tokens.copy(), ORDERS, HEADS, SIZE, seed=seed))  # deterministic
    assert np.mean(ids != ngram_hash_ids(tokens, ORDERS, HEADS, SIZE, seed=seed + 1)) > 0.9
    m = ngram_hash.hash_multipliers(ORDERS, HEADS, seed)
    assert m.dtype == np.uint64 and np.all(m % 2 == 1) and len(np.unique(m)) == m.size


def test_hash_is_causal_and_spreads_ngrams():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 1000, (2, 64))
    ids = ngram_hash_ids(tokens, ORDERS, HEADS, SIZE)
    for t in (0, 5, 40):
        changed = tokens.copy()
        changed[:, t + 1] = (changed[:, t + 1] + 1) % 1000
        other = ngram_hash_ids(changed, ORDERS, HEADS, SIZE)
        np.testing.assert_array_equal(other[:, :t + 1], ids[:, :t + 1])
        assert np.mean(other[:, t + 1] != ids[:, t + 1]) > 0.8  # ... and the changed position moves
    # the n-grams that do not reach back to the start are hashed alike wherever they appear
    rep = np.tile(np.array([[3, 1, 4, 1, 5]]), (1, 4))
    rid = ngram_hash_ids(rep, ORDERS, HEADS, SIZE)
    np.testing.assert_array_equal(rid[0, 5:10], rid[0, 10:15])
    assert np.all(rid[0, 0] != rid[0, 5])  # token 3 after the start (PAD-padded) vs after (1, 5)
    # a large random corpus fills each head's table roughly uniformly
    big = ngram_hash_ids(rng.integers(0, 30_000, (8, 512)), (2,), 1, 97)
    counts = np.bincount(big.ravel(), minlength=97)
    assert counts.min() > 0.5 * counts.mean() and counts.max() < 1.5 * counts.mean()
    with pytest.raises(ValueError):
        ngram_hash_ids(np.array([[1, -1]]), ORDERS, HEADS, SIZE)




def _setup(D=16, d_head=4, B=2, T=11, kernel=3, seed=0):
    module = Engram(500, ORDERS, HEADS, SIZE, d_head, kernel=kernel)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 500, (B, T))
    ids = jnp.asarray(ngram_hash_ids(tokens, ORDERS, HEADS, SIZE))
    h = jax.random.normal(jax.random.key(seed), (B, T, D))
    variables = jax.jit(module.init)(jax.random.key(seed + 1), h, ids)
    return module, tokens, ids, h, variables


def test_engram_matches_naive_reference_and_axes():
    module, tokens, ids, h, variables = _setup()
    boxed = variables["params"]
    assert boxed["table"].names == ("ngram", "mem")
    assert boxed["table"].value.shape == (sum(engram_table_sizes(ORDERS, HEADS, SIZE)), 4)
    assert boxed["key"]["kernel"].names == ("mem", "embed") and boxed["key"]["kernel"].value.shape == (24, 16)
    assert not np.any(np.asarray(boxed["conv"].value))  # conv starts at zero: out = u
    params = perturbed(variables, 5)
    out = np.asarray(module.apply({"params": params}, h, ids))
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), params)
    ids_np, h_np = np.asarray(ids), np.asarray(h, np.float64)
    B, T, D = h_np.shape
    delta, K = max(ORDERS), p["conv"].shape[0]
    u = np.zeros((B, T, D))
    for b in range(B):
        for t in range(T):
            e = np.concatenate([p["table"][i] for i in ids_np[b, t]])
            k, v = e @ p["key"]["kernel"], e @ p["value"]["kernel"]
            s = rms_ref(h_np[b, t], p["query_norm"]["scale"]) @ rms_ref(k, p["key_norm"]["scale"]) / math.sqrt(D)
            alpha = 1.0 / (1.0 + math.exp(-math.copysign(math.sqrt(max(abs(s), 1e-6)), s)))
            u[b, t] = alpha * v
    c = rms_ref(u, p["conv_norm"]["scale"])
    ref = np.zeros_like(u)
    for b in range(B):
        for t in range(T):
            y = sum(p["conv"][i] * c[b, t - i * delta] for i in range(K) if t - i * delta >= 0)
            ref[b, t] = u[b, t] + y / (1.0 + np.exp(-y))
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)
    assert float(np.std(out)) > 0.1
    with pytest.raises(ValueError, match="expects 6 ids"):
        module.apply({"params": params}, h, ids[..., :4])


def test_engram_is_causal():
    module, tokens, ids, h, variables = _setup(T=16)
    params = perturbed(variables, 6)
    out = module.apply({"params": params}, h, ids)
    for t0 in (3, 9):
        later = tokens.copy()
        later[:, t0 + 1:] = (later[:, t0 + 1:] + 17) % 500
        ids2 = jnp.asarray(ngram_hash_ids(later, ORDERS, HEADS, SIZE))
        h2 = h.at[:, t0 + 1:].add(1.0)
        out2 = module.apply({"params": params}, h2, ids2)
        np.testing.assert_allclose(out2[:, :t0 + 1], out[:, :t0 + 1], atol=1e-6, rtol=0)
        assert float(jnp.max(jnp.abs(out2[:, t0 + 1:] - out[:, t0 + 1:]))) > 1e-3


def test_decoder_with_engram_runs():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=48,
                      memory="engram", d_mem=8, engram_layers=(1,), engram_table_size=53)
    model = DecoderLM(cfg)
    ex = example_inputs(cfg, 2, 8)
    ids = ex["host_inputs"]["ngram_ids"]
    assert ids.shape == (2, 8, 8) and ids.dtype == np.int32
    assert host_shapes(cfg, 2, 8) == {"ngram_ids": ((2, 8, 8), np.int32)}  # declared, not computed
    variables = jax.jit(model.init)(jax.random.key(0), **ex)
    assert "engram" in variables["params"]["layers_1"] and "engram" not in variables["params"]["layers_0"]
    assert variables["params"]["layers_1"]["engram"]["table"].names == ("ngram", "mem")
    params = perturbed(variables, 1)
    tokens = np.random.default_rng(0).integers(0, 64, (2, 10))
    logits = jax.jit(model.apply)({"params": params}, tokens, host_inputs=host_inputs(cfg, tokens))
    assert logits.shape == (2, 10, 64) and bool(jnp.all(jnp.isfinite(logits)))
    with pytest.raises(ValueError, match="needs ngram_ids"):
        model.apply({"params": params}, tokens)


def test_engram_model_trains(tiny_config, tmp_path):
    wd = str(tmp_path / "engram")
    cfg = tiny_config(**{"model.memory": "engram", "model.d_mem": 8, "model.engram_layers": [1],
                         "train.steps": 20, "train.lr": 1e-2, "train.eval_every": 20, "train.ckpt_every": 20})
    result = train_and_evaluate(cfg, wd)
    with open(os.path.join(wd, "metrics.jsonl")) as f:
        curve = {r["step"]: r["loss"] for r in map(json.loads, f) if r["kind"] == "train"}
    assert np.mean([curve[s] for s in range(16, 21)]) < np.mean([curve[s] for s in range(1, 6)]) - 0.3
    assert math.isfinite(result["val_loss"])
