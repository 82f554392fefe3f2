"""Folded MeKi with its tables in host memory (:mod:`edge_jax.papers.meki.host_tables`): the KV-cache
decoder fed the gathered rows through ``host_fn`` matches the full forward, and the decode benchmark runs."""
import dataclasses

import jax
import numpy as np
import pytest
from helpers import random_decoder_params

from edge_jax.infer import decode_step, greedy_decode, init_cache, prefill
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.generate import greedy_generate
from edge_jax.models.inference import inference_form
from edge_jax.papers.meki.host_tables import host_tables

BASE = ModelConfig(vocab_size=96, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96)
MEKI = dataclasses.replace(BASE, memory="meki", d_mem=16)
B, S, P = 2, 11, 5  # batch, total tokens, prompt


def tokens(seed=2):
    return np.asarray(jax.random.randint(jax.random.key(seed), (B, S), 1, BASE.vocab_size))


def assert_cached_matches_full(cfg, params, full_params, host_fn):
    """Prefill P tokens, then one token per step, each with its host inputs: the full forward's logits."""
    model, toks = DecoderLM(cfg), tokens()
    full_BTV = np.asarray(jax.jit(model.apply)({"params": full_params}, toks))
    cache = init_cache(model, B, S)
    logits_BV, cache = prefill(model, params, cache, toks[:, :P], host_fn(toks[:, :P]))
    np.testing.assert_allclose(logits_BV, full_BTV[:, P - 1], atol=1e-5, rtol=1e-5)
    for t in range(P, S):
        logits_BV, cache = decode_step(model, params, cache, toks[:, t:t + 1], host_fn(toks[:, t:t + 1]))
        np.testing.assert_allclose(logits_BV, full_BTV[:, t], atol=1e-5, rtol=1e-5, err_msg=f"position {t}")


@pytest.mark.parametrize("position", ["parallel_ffn", "after_attn"])
def test_host_tables_match_full(position):
    cfg = dataclasses.replace(MEKI, meki_position=position)
    folded, folded_cfg = inference_form(random_decoder_params(cfg), cfg)
    host = host_tables(folded, folded_cfg)
    assert "table" not in host.params["layers_0"]["meki"]
    assert host.table_VLM.shape == (BASE.vocab_size, BASE.n_layers, 16)
    assert host.bytes_per_token == BASE.n_layers * 16 * 4
    assert_cached_matches_full(folded_cfg, host.params, folded, lambda t: {"meki_rows": host.gather(t)})
    np.testing.assert_array_equal(host.host_fn(tokens())["meki_rows"], host.rows(tokens()))


def test_greedy_decode_with_host_tables_matches_generation():
    cfg = dataclasses.replace(MEKI, meki_position="parallel_ffn")
    params = random_decoder_params(cfg)
    prompt_BT = np.asarray(tokens()[:, :4])
    want = greedy_generate(DecoderLM(cfg).apply, params, [list(p) for p in prompt_BT], 6, pad_id=0)
    folded, folded_cfg = inference_form(params, cfg)
    host = host_tables(folded, folded_cfg)
    got = greedy_decode(DecoderLM(folded_cfg), host.params, prompt_BT, 6, host_fn=host.host_fn)
    np.testing.assert_array_equal(got, np.array(want))


def test_host_tables_need_a_folded_model():
    with pytest.raises(ValueError, match="folded MeKi"):
        host_tables(random_decoder_params(MEKI), MEKI)


def test_meki_decode_benchmark_smoke():
    import json

    from edge_jax.papers.meki.bench import VARIANTS, format_report, measure, to_json
    base = dataclasses.replace(BASE, vocab_size=128)
    r = measure(base, d_mem=8, batch=1, prompt=4, new_tokens=3, repeats=2)
    assert set(r["tokens_per_s"]) == set(VARIANTS)
    assert all(np.isfinite(v) and v > 0 for v in r["tokens_per_s"].values())
    assert r["bytes_per_token"] == base.n_layers * 8 * 4
    assert r["round_ratio"]["baseline"] == 1.0
    lo, hi = r["round_ratio_p25_p75"]["folded"]
    assert lo <= r["round_ratio"]["folded"] <= hi
    assert "folded/baseline" in format_report(base, 8, r, 1, 4, 3, 2)
    out = json.loads(json.dumps(to_json(base, 8, r, 1, 4, 3, 2)))
    assert out["shape"]["d_mem"] == 8 and out["ratio"]["folded"] == r["ratio"]["folded"]
