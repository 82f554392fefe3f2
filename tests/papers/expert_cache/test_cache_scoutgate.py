"""edge_jax.papers.expert_cache.scoutgate: context windows, loss, model wiring, training and persistence."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.data.routing_trace import RoutingTrace
from edge_jax.papers.expert_cache.scoutgate import (
    ScoutGate,
    ScoutGateConfig,
    context_ids,
    k_hot,
    load_params,
    predict,
    recall_at_k,
    save_params,
    scoutgate_loss,
    train_scoutgate,
)
from edge_jax.papers.expert_cache.synthetic import synthetic_routing

SMALL = ScoutGateConfig(m=4, d_proj=32, d_layer=8, d_expert=16, d_rank=32, steps=60, batch=128,
                        eval_tokens=512)


def _slice(trace, a, b):
    """Tokens [a, b) of `trace` as a trace of their own (a sequence cut at `a` starts there)."""
    s = trace.seq_starts
    starts = np.unique(np.concatenate([[a], s[(s >= a) & (s < b)]])) - a
    return dataclasses.replace(trace, tokens=trace.tokens[a:b], seq_starts=starts.astype(np.int64),
                               experts=trace.experts[a:b], probs=trace.probs[a:b])


def _token_routed_trace(n=4096, n_layers=3, n_experts=8, top_k=2, vocab=32, d_embed=64, seed=0):
    """Routing that is a deterministic function of the current token id (a fixed table per layer).

    ScoutGate is linear in each projected token but for the LayerNorm, so an arbitrary table is only
    learnable when the vocabulary fits in the embedding and projection widths (vocab <= d_embed, d_proj).
    """
    rng = np.random.default_rng(seed)
    table_VLJ = np.stack([np.stack([rng.permutation(n_experts)[:top_k] for _ in range(n_layers)])
                          for _ in range(vocab)]).astype(np.int16)
    tokens = rng.integers(0, vocab, n, dtype=np.int32)
    experts = table_VLJ[tokens]
    probs = np.broadcast_to(np.linspace(0.5, 0.2, top_k, dtype=np.float32), experts.shape).copy()
    starts = np.arange(0, n, 128, dtype=np.int64)
    emb = rng.standard_normal((vocab, d_embed)).astype(np.float32)
    return RoutingTrace(tokens=tokens, seq_starts=starts, experts=experts, probs=probs,
                        layers=tuple(range(n_layers)), n_experts=n_experts, top_k=top_k,
                        embeddings=emb).validate()


def test_context_ids_stay_inside_their_sequence():
    ids, valid = context_ids(np.array([10, 11, 12, 13, 14], np.int32), np.array([0, 3]), 3)
    np.testing.assert_array_equal(ids, [[0, 0, 10], [0, 10, 11], [10, 11, 12], [0, 0, 13], [0, 13, 14]])
    np.testing.assert_array_equal(valid, [[0, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 1], [0, 1, 1]])
    assert ids.dtype == np.int32 and valid.dtype == bool
    ids, valid = context_ids(np.zeros(0, np.int32), np.zeros(0, np.int64), 8)
    assert ids.shape == valid.shape == (0, 8)


def test_k_hot_sums_to_k():
    t = synthetic_routing(500, 3, 8, 2, seed=1)
    hot = k_hot(t.experts, 8)
    assert hot.shape == (500, 3, 8) and hot.dtype == np.float32
    np.testing.assert_array_equal(hot.sum(-1), 2.0)
    np.testing.assert_array_equal(np.take_along_axis(hot, t.experts.astype(int), -1), 1.0)


def test_loss_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (16, 3, 8)).astype(np.float32)
    target = k_hot(np.stack([rng.permutation(8)[:2] for _ in range(48)]).reshape(16, 3, 2), 8)
    loss, aux = scoutgate_loss(jnp.asarray(logits), jnp.asarray(target), 2, 0.3)
    x = logits.astype(np.float64)
    p = 1 / (1 + np.exp(-x))
    bce = -(target * np.log(p) + (1 - target) * np.log(1 - p)).mean()
    card = ((p.sum(-1) - 2) ** 2).mean()
    np.testing.assert_allclose(float(aux["bce"]), bce, rtol=1e-5)
    np.testing.assert_allclose(float(aux["card"]), card, rtol=1e-5)
    np.testing.assert_allclose(float(loss), bce + 0.3 * card, rtol=1e-5)


def _model_and_params(d_hidden=0):
    model = ScoutGate(3, 8, dataclasses.replace(SMALL, d_hidden=d_hidden))
    x = jnp.asarray(np.random.default_rng(0).standard_normal((5, 4, 16)), jnp.float32)
    mask = jnp.asarray(np.array([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1], [1, 1, 1, 1]], bool))
    # jitted init and apply (``model`` here): one compile each, where running op by op compiles every op
    return jax.jit(model.apply), jax.jit(model.init)(jax.random.PRNGKey(0), x, mask), x, mask


@pytest.mark.parametrize("d_hidden", [0, 24])
def test_model_shape_and_mask(d_hidden):
    apply, params, x, mask = _model_and_params(d_hidden)
    out = apply(params, x, mask)
    assert out.shape == (5, 3, 8) and out.dtype == jnp.float32
    noise = jnp.asarray(np.random.default_rng(1).standard_normal(x.shape), jnp.float32)
    changed = jnp.where(mask[..., None], x, 100.0 * noise)
    np.testing.assert_array_equal(np.asarray(apply(params, changed, mask)), np.asarray(out))
    real = jnp.where(mask[..., None], x + noise, x)
    assert not np.allclose(np.asarray(apply(params, real, mask)), np.asarray(out))


def test_expert_embeddings_are_per_layer():
    apply, params, x, mask = _model_and_params()
    out = np.asarray(apply(params, x, mask))
    p = jax.tree_util.tree_map(lambda a: a, params)
    p["params"]["expert_emb"] = params["params"]["expert_emb"].at[1].add(0.5)
    new = np.asarray(apply(p, x, mask))
    np.testing.assert_array_equal(new[:, [0, 2]], out[:, [0, 2]])
    assert not np.allclose(new[:, 1], out[:, 1])


def test_training_learns_token_routing():
    trace = _token_routed_trace()
    train, held = _slice(trace, 0, 3072), _slice(trace, 3072, 4096)
    cfg = dataclasses.replace(SMALL, d_proj=64, steps=80, lr=1e-2)
    logs = []
    params, info = train_scoutgate(train, cfg, seed=0, log=logs.append)
    assert len(logs) == len(info["history"]) and "bce" in logs[-1]
    assert info["history"][-1]["bce"] < 0.2 * info["history"][0]["bce"]
    assert info["steps"] == 80 and info["wall_s"] > 0
    probs = predict(params, held, cfg, batch=300)
    assert probs.shape == (1024, 3, 8) and probs.dtype == np.float32
    assert recall_at_k(probs, held.experts) > 0.9
    np.testing.assert_allclose(probs.sum(-1).mean(axis=0), 2.0, atol=0.5)


def test_training_reduces_loss_on_synthetic_trace():
    trace = synthetic_routing(4096, 3, 8, 2, seed=0, d_embed=16)
    params, info = train_scoutgate(trace, SMALL, seed=1, log=lambda s: None)
    assert info["history"][-1]["bce"] < info["history"][0]["bce"]
    assert np.isfinite(info["card"])


def test_recall_at_k():
    experts = np.array([[[0, 1]], [[2, 3]]], np.int16)
    probs = np.array([[[0.9, 0.1, 0.8, 0.0]], [[0.0, 0.1, 0.8, 0.7]]], np.float32)
    assert recall_at_k(probs, experts) == pytest.approx(0.75)


def test_save_load_round_trip(tmp_path):
    trace = synthetic_routing(700, 3, 8, 2, seed=2, d_embed=16)
    params, _ = train_scoutgate(trace, dataclasses.replace(SMALL, steps=5), log=lambda s: None)
    path = tmp_path / "sg" / "scoutgate.npz"
    save_params(path, params, {"config": dataclasses.asdict(SMALL), "note": "x"})
    loaded, meta = load_params(path)
    assert meta == {"config": dataclasses.asdict(SMALL), "note": "x"}
    np.testing.assert_array_equal(predict(loaded, trace, SMALL), predict(params, trace, SMALL))
    assert [p.name for p in path.parent.iterdir()] == ["scoutgate.npz"]


def test_missing_embeddings_is_a_one_line_error():
    trace = dataclasses.replace(synthetic_routing(100, 2, 8, 2), embeddings=None)
    with pytest.raises(ValueError, match="no embeddings|has none") as e:
        train_scoutgate(trace, SMALL, log=lambda s: None)
    assert "\n" not in str(e.value) and "edge-jax moe trace" in str(e.value)
    with pytest.raises(ValueError, match="edge-jax moe trace"):
        predict({}, trace, SMALL)
