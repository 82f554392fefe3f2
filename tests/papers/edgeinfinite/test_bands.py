"""The long-context harness's near band (longctx.near_lengths, scored apart as longctx/near/*), and every
registered KV method run at the tiny preset's lengths of both bands, as Table 1's cells configure it."""
import flax.linen as nn
import jax
import numpy as np
import pytest
from helpers import perturbed, slow_except

from edge_jax.config import ConfigError, load_config
from edge_jax.data import get_tokenizer
from edge_jax.data.builders.longctx_tasks import CATEGORIES
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.infer.longctx import evaluate_longctx
from edge_jax.models import DecoderLM, ModelConfig

TOKENIZER = get_tokenizer("byte", "longctx")


def _model(**infini):
    cfg = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=32,
                      rope_theta=10_000.0, **infini)
    # jitted init (one compile; perturbed is one program itself)
    params = nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(0), np.zeros((1, 8), np.int32))["params"])
    return DecoderLM(cfg), perturbed(params, 1, scale=0.05)


def test_the_near_band_is_scored_apart():
    """Adding a near band leaves every metric of longctx.lengths as it was; the band gets its own overall,
    categories and answer NLL (means over its lengths alone) and its lengths their per-length scores."""
    model, params = _model()
    evaluation = {"init_from": "/base", "train.steps": 0, "longctx.method": "streamingllm", "longctx.budget": 48,
                  "longctx.sink": 4, "longctx.lengths": (430, 460), "longctx.examples": 2,
                  "longctx.tasks": ("passkey", "multikey"), "longctx.answer_tokens": 2, "longctx.prefill_chunk": 64}
    alone = evaluate_longctx(model, params, TOKENIZER, load_config("configs/lm.py:size=tiny", evaluation),
                             log=lambda m: None)
    config = load_config("configs/lm.py:size=tiny", {**evaluation, "longctx.near_lengths": (380, 400)})
    both = evaluate_longctx(model, params, TOKENIZER, config, log=lambda m: None)
    for key, value in alone.items():
        if key not in ("longctx/seconds", "longctx/prompts", "longctx/peak_cache_tokens"):
            assert both[key] == value, key
    assert (alone["longctx/prompts"], both["longctx/prompts"]) == (8, 16)
    cats = [CATEGORIES[t] for t in ("passkey", "multikey")]
    for cat in cats:
        near = np.mean([both[f"longctx/{cat}/len{n}"] for n in (380, 400)])
        assert both[f"longctx/near/{cat}"] == pytest.approx(near)
        assert 0 < both[f"longctx/near/answer_nll/{cat}"] < 50
    assert both["longctx/near/overall"] == pytest.approx(np.mean([both[f"longctx/near/{c}"] for c in cats]))
    assert both["longctx/near/answer_nll"] == pytest.approx(np.mean([both[f"longctx/near/answer_nll/{c}"]
                                                                     for c in cats]))
    assert {"longctx/len380", "longctx/len400"} <= set(both) and not any(k.startswith("longctx/near/") for k in alone)


@pytest.mark.parametrize("near,message", [((2079,), "not among longctx.lengths"),
                                          ((100, 600), r"near_lengths=\(100, 600\) must each lie in \[256")])
def test_bad_near_lengths_are_one_line_errors(near, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config("configs/edgeinfinite.py", {"init_from": "/base", "longctx.near_lengths": near})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("far", ["4x", pytest.param("all", marks=pytest.mark.slow)])  # all: FullKV, SnapKV ~2 min
# the paper's method and one cache policy in the fast tier; every policy's cache is checked against the
# full forward in tests/infer/test_kv_baselines.py (-m slow runs them all here too)
@pytest.mark.parametrize("method", slow_except(KV_METHODS.names(), ("edgeinfinite", "streamingllm")))
def test_every_kv_method_runs_at_the_tiny_lengths(method, far):
    """Table 1's cell of each method (its config as the grid loads it), one passkey prompt per length of
    the near band and of the paper's band (its 4x pair; every length with -m slow) on a small random model
    with the tiny sizes: every length scored, the local caches within EdgeInfinite's 192 slots and twice
    that (FullKV keeps the whole prompt)."""
    from edge_jax.grid.spec import load_grid
    grid = load_grid("ablations/edgeinfinite_main.py", "tiny")
    config = load_config(grid.base, {**grid.overrides(method, 0, {}), "init_from": "/base",
                                     "longctx.tasks": ("passkey",), "longctx.answer_tokens": 2})
    assert len(config.longctx.lengths) == 6 and len(config.longctx.near_lengths) == 4
    if far == "4x":
        config.longctx.lengths = tuple(config.longctx.lengths)[:2]
    m = config.model
    sizes = dict(infini_sink=m.infini_sink, infini_window=m.infini_window, infini_segment=m.infini_segment)
    model, params = _model(**sizes, infini_hidden=m.infini_hidden)
    lengths = tuple(config.longctx.near_lengths) + tuple(config.longctx.lengths)
    got = evaluate_longctx(model, params, TOKENIZER, config, log=lambda msg: None)
    assert got["longctx/prompts"] == len(lengths) and {f"longctx/len{n}" for n in lengths} <= set(got)
    assert 0 <= got["longctx/near/overall"] <= 100 and 0 < got["longctx/near/answer_nll"] < 50
    assert 0 <= got["longctx/overall"] <= 100 and 0 < got["longctx/answer_nll"] < 50
    peak = got["longctx/peak_cache_tokens"]  # the most tokens a layer held at the end of a prompt
    budget = config.longctx.budget
    assert budget == m.infini_sink + m.infini_window + m.infini_segment == 192
    if method == "fullkv":
        assert peak >= max(lengths) - 11
    elif method == "edgeinfinite":
        assert peak <= budget
    else:  # the budget, plus the answer tokens and what PyramidKV's first layers hold above the average
        assert peak < 2 * budget
