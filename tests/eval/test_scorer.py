"""The batched scorer against the one-request-at-a-time reference, for every model kind; lm-eval's
tokenisation rules; truncation; the mesh."""
import functools

import jax
import numpy as np
import pytest
from conftest import tiny_overrides
from helpers import requires_devices, slow_except

from edge_jax.config import load_config
from edge_jax.data.tokenizers import ByteTokenizer
from edge_jax.eval.scorer import Scorer, bucket, encode_pair, loglikelihoods_reference, request_row
from edge_jax.eval.tasks import TaskError
from edge_jax.models.inputs import example_inputs, host_inputs
from edge_jax.train.setup import build

TOL = {"float32": 2e-4, "bfloat16": 0.15}  # absolute, on sums of ~10-60 token log-probabilities


class PieceTokenizer:
    """Greedy longest match over a few multi-character pieces, then bytes: merges across a
    context/continuation boundary the way BPE does."""
    pieces = {"ab": 300, " b": 301, "c\n": 302}
    eos_id, pad_id, vocab_size = 256, 257, 303

    def encode(self, text):
        out, i = [], 0
        while i < len(text):
            two = text[i:i + 2]
            if two in self.pieces:
                out.append(self.pieces[two])
                i += 2
            else:
                out += list(text[i].encode())
                i += 1
        return out


def test_encode_pair_follows_lm_eval():
    tok = PieceTokenizer()
    # trailing space of the context moves to the continuation, where it merges with "b"
    assert encode_pair(tok, "x ", "b") == ([ord("x")], [301])
    # the continuation is read off the whole string: "a" + "b" merge, so the context keeps one token less
    ctx, cont = encode_pair(tok, "xa", "bc")
    assert ctx == [ord("x"), ord("a")] and cont == [ord("c")]  # whole = x, ab, c; ctx = x, a -> cont from 2
    # an empty context is the eos id
    assert encode_pair(tok, "", "zz") == ([256], [ord("z"), ord("z")])


def test_request_row_truncates_from_the_left_and_refuses_without_truncation():
    assert request_row(list(range(10)), [20, 21], max_length=5) == ([6, 7, 8, 9, 20], 2)
    assert request_row(list(range(10)), [20, 21], max_length=6) == ([5, 6, 7, 8, 9, 20], 2)
    assert request_row([1, 2], [20, 21], max_length=6, truncate=False) == ([1, 2, 20], 2)
    with pytest.raises(TaskError, match="truncation is off"):
        request_row(list(range(10)), [20, 21], max_length=6, truncate=False)
    with pytest.raises(TaskError, match="longer than the model's 3"):
        request_row([1], [5, 6, 7, 8], max_length=3)
    with pytest.raises(TaskError, match="no tokens"):
        request_row([1], [], max_length=3)


def test_buckets_repeat_and_cap():
    assert [bucket(n, 200, steps=1) for n in (1, 32, 33, 64, 65, 199)] == [32, 32, 64, 64, 128, 200]
    assert [bucket(n, 200, steps=4) for n in (1, 33, 41, 57, 65, 129, 161, 199, 250)] == [32, 40, 48, 64, 80, 160,
                                                                                          192, 200, 250]
    assert [bucket(n, 200) for n in (33, 37, 65, 73, 129, 145)] == [36, 40, 72, 80, 144, 160]


def _requests(seed=0, n=13):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "def", "return", "x = 1", "\n", "for i in range(3):", "Question:"]
    out = []
    for _ in range(n):
        ctx = " ".join(rng.choice(words, size=rng.integers(1, 30)))
        out.append((ctx, " " + " ".join(rng.choice(words, size=rng.integers(1, 4)))))
    out.append(("", " beta gamma"))      # empty context: eos
    out.append(("word  ", "next"))        # trailing spaces move over
    return out


def _model(spec="configs/lm.py:size=tiny", **over):
    cfg = load_config(spec, tiny_overrides(**{"data.tokenizer": "byte", "data.name": "pystdlib", **over}))
    run = build(cfg)
    params = jax.jit(run.model.init)(jax.random.PRNGKey(1), **example_inputs(run.model.cfg))["params"]
    params = jax.tree.map(lambda p: p + 0.02 * jax.random.normal(jax.random.PRNGKey(2), p.shape, p.dtype), params)
    return run, params


def _compare(run, params, max_length, dtype="float32", mesh=None, batch_size=4, requests=None):
    requests = requests or _requests()
    host = functools.partial(host_inputs, run.model.cfg)
    fast = Scorer(run.model.apply, params, run.tokenizer, max_length, batch_size, host_fn=host, mesh=mesh,
                  progress=False)(requests)
    ref = loglikelihoods_reference(jax.jit(run.model.apply), params, run.tokenizer, requests, max_length, host_fn=host)
    got, want = np.array([f[0] for f in fast]), np.array([r[0] for r in ref])
    assert np.all(np.isfinite(got)) and np.abs(got).min() > 0
    np.testing.assert_allclose(got, want, atol=TOL[dtype], rtol=0)
    if dtype == "float32":
        assert [f[1] for f in fast] == [r[1] for r in ref]
    return fast


KINDS = {
    "dense": ("configs/lm.py:size=tiny", {}),
    "mla": ("configs/plm.py:size=tiny", {"train.sparsity_batches": 0}),
    "meki": ("configs/meki.py:size=tiny", {"model.d_mem": 16}),
    "ple": ("configs/meki.py:size=tiny,memory=ple", {"model.d_mem": 16}),
    "engram": ("configs/meki.py:size=tiny,memory=engram", {"model.d_mem": 16}),
    "moe": ("configs/lm.py:size=tiny", {"model.moe_experts": 4, "model.moe_top_k": 2}),
}


# dense, MLA and MeKi (host inputs) in the fast tier; PLE and Engram feed the scorer as MeKi does (host
# inputs), MoE as dense: with -m slow
@pytest.mark.parametrize("kind", slow_except(KINDS, ("dense", "mla", "meki")))
def test_scorer_matches_the_reference_for_every_model_kind(kind):
    spec, over = KINDS[kind]
    run, params = _model(spec, **over)
    _compare(run, params, max_length=48)   # buckets 32 and 48, some rows truncated


def test_scorer_in_bfloat16():
    run, params = _model(**{"model.dtype": "bfloat16"})
    _compare(run, params, max_length=64, dtype="bfloat16")


@requires_devices(8)
def test_scorer_on_a_mesh_equals_one_device():
    from edge_jax.sharding import make_mesh
    run, params = _model()
    mesh = make_mesh(load_config("configs/lm.py:size=tiny", {"mesh.data": 4, "mesh.fsdp": 2}).mesh)
    single = _compare(run, params, max_length=64, batch_size=8)
    sharded = _compare(run, params, max_length=64, batch_size=8, mesh=mesh)
    np.testing.assert_allclose([s[0] for s in sharded], [s[0] for s in single], atol=TOL["float32"])
    with pytest.raises(TaskError, match="multiple of 8"):
        Scorer(run.model.apply, params, run.tokenizer, 64, batch_size=4, mesh=mesh)


def test_meki_folded_form_scores_like_the_training_form():
    from edge_jax.models import DecoderLM
    from edge_jax.models.inference import inference_form
    run, params = _model("configs/meki.py:size=tiny", **{"model.d_mem": 16})
    folded, cfg = inference_form(params, run.model.cfg)
    requests = _requests(3)
    train = Scorer(run.model.apply, params, run.tokenizer, 64, 4, progress=False)(requests)
    infer = Scorer(DecoderLM(cfg).apply, folded, run.tokenizer, 64, 4, progress=False)(requests)
    np.testing.assert_allclose([a[0] for a in infer], [a[0] for a in train], atol=TOL["float32"])


def test_edgeinfinite_memory_path_scores_contexts_past_the_training_length():
    run, params = _model("configs/edgeinfinite.py:size=tiny,stage=gate", **{"init_from": "/base", "train.steps": 4,
                                                                            "train.warmup_steps": 1})
    cfg = run.model.cfg
    assert cfg.infini_segment and cfg.infini_hidden
    long = [("filler text " * 40 + "key 7 is", " 93"), ("short", " one")]
    max_length = 512
    assert len(long[0][0]) > cfg.infini_sink + 2 * cfg.infini_segment + cfg.infini_window  # several segments
    _compare(run, params, max_length=max_length, requests=long, batch_size=2)


def test_scorer_needs_a_continuation_that_fits():
    run, params = _model()
    with pytest.raises(TaskError, match="raise --max-length"):
        Scorer(run.model.apply, params, ByteTokenizer(), 8, progress=False)([("a", " " + "b" * 20)])


def test_request_order_is_restored():
    run, params = _model()
    requests = _requests(5)
    fast = Scorer(run.model.apply, params, run.tokenizer, 64, 3, progress=False)(requests)
    one = [Scorer(run.model.apply, params, run.tokenizer, 64, 1, progress=False)([r])[0] for r in requests[:4]]
    np.testing.assert_allclose([f[0] for f in fast[:4]], [o[0] for o in one], atol=TOL["float32"])
