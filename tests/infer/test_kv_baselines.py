"""KV-cache baselines against the full forward: with a budget that holds everything they must be
FullKV exactly; SnapKV's chunked votes must not depend on the prefill chunk size."""
import dataclasses

import jax
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.infer.kv_baselines import FullKVSession, SnapKVSession, StreamingSession
from edge_jax.models import DecoderLM, ModelConfig

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)


@pytest.fixture(scope="module")
def setup():
    model = DecoderLM(CFG)
    params = perturbed(jax.jit(model.init)(jax.random.key(0), np.zeros((1, 8), np.int32)), 1, scale=0.05)
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (2, 50), 0, 64))
    return model, params, tokens, np.asarray(jax.jit(model.apply)({"params": params}, tokens))


@pytest.mark.parametrize("name", ["fullkv", "snapkv", "pyramidkv", "streamingllm"])
def test_roomy_budget_is_fullkv(setup, name):
    model, params, tokens, full = setup
    session = {"fullkv": lambda: FullKVSession(model, params, 16, 8),
               "snapkv": lambda: SnapKVSession(model, params, 16, 8, 64, 4, 3),
               "pyramidkv": lambda: SnapKVSession(model, params, 16, 8, 200, 4, 3, pyramid=True, beta=2.0),
               "streamingllm": lambda: StreamingSession(model, params, 64, 4, 8)}[name]()
    got = [np.asarray(session.prefill(tokens[:, :40]))]
    got += [np.asarray(session.step(tokens[:, t:t + 1])) for t in range(40, 48)]
    np.testing.assert_allclose(np.stack(got, 1), full[:, 39:48], rtol=1e-5, atol=2e-5)


MLA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, head_dim=8, d_ff=64,
                  qk_norm=False, attention="mla", kv_lora_rank=12, d_rope=4, rope_theta=10_000.0)


@pytest.mark.parametrize("absorb", [False, True], ids=["naive", "absorbed"])
@pytest.mark.parametrize("name", ["fullkv", "snapkv", "streamingllm"])
def test_mla_latent_cache_in_the_baselines(name, absorb):
    """The baselines run on MLA's latent cache too (one KV group): a roomy budget is FullKV exactly."""
    cfg = dataclasses.replace(MLA, mla_absorb=absorb)
    model = DecoderLM(cfg)
    params = perturbed(jax.jit(model.init)(jax.random.key(0), np.zeros((1, 8), np.int32)), 1, scale=0.05)
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (2, 30), 0, 64))
    full = np.asarray(jax.jit(model.apply)({"params": params}, tokens))
    session = {"fullkv": lambda: FullKVSession(model, params, 8, 4),
               "snapkv": lambda: SnapKVSession(model, params, 8, 4, 40, 4, 3),
               "streamingllm": lambda: StreamingSession(model, params, 40, 4, 4)}[name]()
    got = [np.asarray(session.prefill(tokens[:, :24]))]
    got += [np.asarray(session.step(tokens[:, t:t + 1])) for t in range(24, 28)]
    np.testing.assert_allclose(np.stack(got, 1), full[:, 23:28], rtol=1e-5, atol=2e-5)
    assert set(session.caches[0]) == {"c_kv", "k_rope", "pos", "valid"}


def test_tight_budgets_evict(setup):
    model, params, tokens, full = setup
    snap = SnapKVSession(model, params, 16, 8, 20, 4, 3)
    snap.prefill(tokens[:, :40])
    kept = [np.asarray(c["valid"]).sum(-1) for c in snap.caches]
    assert all((k == 20).all() for k in kept)
    pos = np.asarray(snap.caches[0]["pos"])[0, 0, :20]
    assert list(pos[-4:]) == [36, 37, 38, 39] and (np.diff(pos) > 0).all()   # window kept, sorted
    stream = StreamingSession(model, params, 24, 4, 8)
    stream.prefill(tokens[:, :40])
    assert stream.next_slot[0] <= 24 and np.asarray(stream.caches[0]["pos"])[0, 0, :24].tolist() == list(range(24))
    pyramid = SnapKVSession(model, params, 16, 8, 20, 4, 3, pyramid=True)
    pyramid.prefill(tokens[:, :40])
    sizes = [int(np.asarray(c["valid"]).sum(-1).max()) for c in pyramid.caches]
    assert sizes[0] > sizes[-1] and sum(sizes) == 3 * 20


def test_snapkv_selection_does_not_depend_on_the_chunk(setup):
    model, params, tokens, _ = setup
    a, b = SnapKVSession(model, params, 16, 8, 20, 4, 3), SnapKVSession(model, params, 64, 8, 20, 4, 3)
    np.testing.assert_allclose(np.asarray(a.prefill(tokens[:, :40])), np.asarray(b.prefill(tokens[:, :40])),
                               rtol=1e-5, atol=2e-5)
    for x, y in zip(a.caches, b.caches):
        np.testing.assert_array_equal(np.asarray(x["pos"]), np.asarray(y["pos"]))


def test_answer_nll_and_greedy_answer_match_the_full_forward():
    from edge_jax.data import get_tokenizer
    from edge_jax.infer.longctx import answer
    tok = get_tokenizer("byte", "longctx")
    cfg = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
    model = DecoderLM(cfg)
    params = perturbed(jax.jit(model.init)(jax.random.key(0), np.zeros((1, 8), np.int32)), 2, scale=0.05)
    prompt, gold = tok.encode("Question: what is it?\nAnswer:"), tok.encode(" 4821")
    got, nll = answer(FullKVSession(model, params, 16, 8), prompt, gold, tok, 5)
    seq = np.asarray([prompt + gold], np.int32)
    logp = np.asarray(jax.nn.log_softmax(jax.jit(model.apply)({"params": params}, seq)[0], axis=-1))
    want = -np.mean([logp[len(prompt) - 1 + i, t] for i, t in enumerate(gold)])
    assert abs(nll - want) < 1e-4
    greedy, ids = list(prompt), []
    for _ in range(5):  # the same greedy continuation, recomputed from scratch each step
        logits = jax.jit(model.apply)({"params": params}, np.asarray([greedy], np.int32))
        nxt = int(np.argmax(np.asarray(logits)[0, -1]))
        if nxt == tok.eos_id:
            break
        greedy.append(nxt)
        ids.append(nxt)
        if "\n" in tok.decode(ids):
            break
    assert got == tok.decode(ids).strip().split("\n")[0].strip()

