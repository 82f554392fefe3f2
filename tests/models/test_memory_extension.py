"""A new memory kind with a host input is one registration: this file defines one (``test_mod7``: a
per-token row of a small table, picked by the id ``token % 7`` computed on the host, projected and
added at the end of every layer) and runs it through the generic code only: training with the real
loop, eval scoring through ``make_scorer``, the KV-cache decoder with ``host_fn``, ahead-of-time
compilation with the host input's abstract shape, and its inference form (the scale folded into the
table). The kind is registered for this file's tests only."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.layers.ffn import dense
from edge_jax.layers.token_memory.base import MEMORY_KINDS, InferenceFormError, MemoryKind
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.inference import has_inference_form, inference_config, inference_form
from edge_jax.models.inputs import example_inputs, host_input_names, host_inputs, host_shapes, with_host_inputs

NAME, INPUT, ROWS = "test_mod7", "test_mod7_ids", 7


class Mod7(nn.Module):
    """``delta = scale * W (T[id])``: T [7, d_mem], W: d_mem -> d_model, scale a scalar."""
    rows: int
    d_mem: int

    @nn.compact
    def __call__(self, h_BTD, ids_BT):
        table = self.param("table", nn.with_logical_partitioning(nn.initializers.normal(0.5), (None, "mem")),
                           (self.rows, self.d_mem))
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.constant(2.0), ()), ())
        return scale * dense(h_BTD.shape[-1], ("mem", "embed"), "proj", 0.5, "float32", "float32")(table[ids_BT])


def _host_inputs(cfg, tokens_BT):
    return {INPUT: (np.asarray(tokens_BT) % ROWS).astype(np.int32)}


def _prepare(cfg, ctx):
    if ctx.get(INPUT) is None:
        raise ValueError(f"memory={NAME} needs {INPUT}; build them with edge_jax.models.inputs.host_inputs")


def _branch(cfg, layer):
    return {"post_ffn": lambda h_BTD, ctx: Mod7(ROWS, cfg.d_mem, name="mod7")(h_BTD, ctx[INPUT])}


def _fold(params, cfg):
    """The scale multiplied into the table (and set to 1): the same function, one multiply less."""
    params = nn.unbox(params)
    out = dict(params)
    for i in range(cfg.n_layers):
        m = params[f"layers_{i}"]["mod7"]
        if float(m["scale"]) == 1.0:
            raise InferenceFormError("this test_mod7 tree is already folded (scale 1); fold the trained params")
        out[f"layers_{i}"] = {**params[f"layers_{i}"],
                              "mod7": {**m, "table": m["table"] * m["scale"], "scale": jnp.ones_like(m["scale"])}}
    return out, cfg


KIND = MemoryKind(_branch, prepare=_prepare, accepts=(INPUT,), host_inputs=_host_inputs, inference_form=_fold,
                  inference_config=lambda cfg: cfg)


@pytest.fixture(autouse=True)
def registered():
    """``test_mod7`` is a memory kind during each test of this file only."""
    with MEMORY_KINDS.override(NAME, KIND):
        yield

CFG = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=48,
                  memory=NAME, d_mem=8)


def _params(cfg=CFG, seed=0):
    return nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(seed), **example_inputs(cfg, 1, 8)))["params"]


def _tokens(seed=1, shape=(2, 12)):
    return np.random.default_rng(seed).integers(0, CFG.vocab_size, shape).astype(np.int32)


def test_the_generic_helpers_ask_the_memory_kind():
    tokens = _tokens()
    assert host_inputs(CFG, tokens)[INPUT].tolist() == (tokens % 7).tolist()
    assert INPUT in host_input_names()
    assert host_shapes(CFG, 3, 5) == {INPUT: ((3, 5), np.int32)}  # from host_inputs on zeros: none declared
    batch = with_host_inputs(CFG, {"inputs": tokens, "targets": tokens})
    assert set(batch) == {"inputs", "targets", INPUT}
    params = _params()
    assert set(params["layers_0"]["mod7"]) == {"table", "scale", "proj"}
    model = DecoderLM(CFG)
    logits = model.apply({"params": params}, tokens, host_inputs=host_inputs(CFG, tokens))
    shifted = model.apply({"params": params}, tokens, host_inputs={INPUT: (tokens + 1) % 7})
    assert logits.shape == (2, 12, 64) and float(jnp.max(jnp.abs(logits - shifted))) > 1e-3  # the input is read
    with pytest.raises(ValueError, match=f"needs {INPUT}"):
        model.apply({"params": params}, tokens)
    with pytest.raises(ValueError, match=f"host input 'ngram_ids' is not an input of model.memory='{NAME}'"):
        model.apply({"params": params}, tokens, host_inputs={INPUT: tokens % 7, "ngram_ids": tokens})


def test_inference_form_scores_like_the_trained_model():
    params, tokens = _params(), _tokens()
    assert has_inference_form(CFG) and inference_config(CFG) is CFG
    folded, cfg = inference_form(params, CFG)
    host = {"host_inputs": host_inputs(CFG, tokens)}
    np.testing.assert_allclose(DecoderLM(cfg).apply({"params": folded}, tokens, **host),
                               DecoderLM(CFG).apply({"params": params}, tokens, **host), atol=1e-5, rtol=1e-5)
    assert float(folded["layers_0"]["mod7"]["scale"]) == 1.0 and float(params["layers_0"]["mod7"]["scale"]) == 2.0
    with pytest.raises(InferenceFormError, match="already folded"):
        inference_form(folded, cfg)


def test_kv_cache_decoding_gets_the_host_inputs_from_host_fn():
    from edge_jax.infer import greedy_decode
    from edge_jax.models.generate import greedy_generate
    params, prompt = _params(), _tokens(shape=(2, 5))
    host_fn = functools.partial(host_inputs, CFG)
    want = greedy_generate(DecoderLM(CFG).apply, params, [list(p) for p in prompt], 4, pad_id=0, host_fn=host_fn)
    np.testing.assert_array_equal(greedy_decode(DecoderLM(CFG), params, prompt, 4, host_fn=host_fn), np.array(want))


def test_trains_scores_and_compiles_through_the_generic_code(tiny_config, tmp_path):
    from edge_jax.compile import aot
    from edge_jax.compile.chips import Target
    from edge_jax.eval.evaluator import make_scorer
    from edge_jax.eval.scorer import loglikelihoods_reference
    from edge_jax.train.evaluate import restore_latest
    from edge_jax.train.loop import train_and_evaluate

    overrides = {"model.memory": NAME, "model.d_mem": 8, "train.steps": 4, "train.eval_every": 4,
                 "train.ckpt_every": 4, "train.eval_batches": 1}
    wd = str(tmp_path / "run")
    result = train_and_evaluate(tiny_config(**overrides), wd)  # train and eval batches carry the host input
    assert np.isfinite(result["val_loss"])
    run, state, step = restore_latest(wd)
    assert step == 4 and "mod7" in state.params["layers_1"]
    requests = [("def f(x):", " return x"), ("import os", "\nimport sys"), ("a = 1", " + 2")]
    scorer = make_scorer(run.model, state.params, run.tokenizer, 32, batch_size=2, progress=False)
    fast = scorer(requests)
    ref = loglikelihoods_reference(run.model.apply, state.params, run.tokenizer, requests, 32,
                                   host_fn=functools.partial(host_inputs, run.model.cfg))
    np.testing.assert_allclose([f[0] for f in fast], [r[0] for r in ref], atol=1e-4, rtol=0)

    config = tiny_config(**overrides, **{"model.vocab_size": 256, "mesh.data": 1, "mesh.fsdp": -1})
    stats = aot.compile_train(config, Target("cpu:8", tuple(jax.devices("cpu")[:8]), None))
    assert stats.tokens == 8 * 32 and stats.argument_bytes > stats.state_bytes  # the batch, host input included
