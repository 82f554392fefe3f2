"""edge_jax.papers.expert_cache.synthetic: seeded synthetic routing traces with skew, token dependence, bursts
and phase shifts, written in the routing-trace format."""
import inspect

import numpy as np
import pytest

from edge_jax.data.routing_trace import read_trace, write_trace
from edge_jax.papers.expert_cache.synthetic import synthetic_routing

SMALL = {"n_tokens": 4096, "n_layers": 3, "n_experts": 8, "top_k": 2, "vocab": 64, "d_embed": 8}
ARRAYS = ("tokens", "seq_starts", "experts", "probs", "embeddings")


def _entropy(counts: np.ndarray) -> float:
    """Entropy in bits of the distribution with these (non-negative) counts."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _top1(trace, layer: int) -> np.ndarray:
    return trace.experts[:, layer, 0].astype(np.int64)


def _top1_share(trace, layer: int) -> float:
    counts = np.bincount(_top1(trace, layer), minlength=trace.n_experts)
    return counts.max() / counts.sum()


def _entropies(trace, layer: int = 0) -> tuple[float, float]:
    """(H(top-1 expert), H(top-1 expert | token)) at `layer`, in bits."""
    vocab = trace.embeddings.shape[0]
    joint = np.zeros((vocab, trace.n_experts))
    np.add.at(joint, (trace.tokens, _top1(trace, layer)), 1)
    conditional = sum(row.sum() / trace.n_tokens * _entropy(row) for row in joint if row.sum())
    return _entropy(joint.sum(0)), conditional


def _burst_excess(trace, window: int = 64) -> float:
    """Mean over windows and layers of max over experts (window top-1 share - overall share)."""
    n = trace.n_tokens // window * window
    out = []
    for layer in range(trace.n_layers):
        top1 = _top1(trace, layer)[:n]
        overall = np.bincount(top1, minlength=trace.n_experts) / n
        win = np.zeros((n // window, trace.n_experts))
        np.add.at(win, (np.arange(n) // window, top1), 1 / window)
        out.append((win - overall).max(1).mean())
    return float(np.mean(out))


def _half_drift(trace) -> float:
    """Mean over layers of the total-variation distance between expert use in the two halves."""
    h, e = trace.n_tokens // 2, trace.n_experts
    out = []
    for layer in range(trace.n_layers):
        first = np.bincount(trace.experts[:h, layer].ravel(), minlength=e) / (h * trace.top_k)
        second = np.bincount(trace.experts[h:, layer].ravel(), minlength=e) / ((trace.n_tokens - h) * trace.top_k)
        out.append(0.5 * np.abs(first - second).sum())
    return float(np.mean(out))


def test_same_seed_same_trace_and_other_seed_differs():
    a, b, c = (synthetic_routing(**SMALL, seed=s) for s in (3, 3, 4))
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta
    assert not np.array_equal(a.experts, c.experts) and not np.array_equal(a.tokens, c.tokens)


def test_shapes_dtypes_and_format():
    t = synthetic_routing(**SMALL, seed=1)
    assert t.validate() is t
    n, layers, k = SMALL["n_tokens"], SMALL["n_layers"], SMALL["top_k"]
    assert t.tokens.shape == (n,) and t.tokens.dtype == np.int32
    assert t.experts.shape == t.probs.shape == (n, layers, k)
    assert t.experts.dtype == np.int16 and t.probs.dtype == np.float32
    assert t.embeddings.shape == (SMALL["vocab"], SMALL["d_embed"]) and t.embeddings.dtype == np.float32
    assert t.seq_starts.dtype == np.int64 and len(t.seq_starts) == n // 256 and t.seq_starts[0] == 0
    assert np.all(np.diff(t.seq_starts) > 0)
    assert t.layers == (0, 1, 2) and t.n_experts == 8 and t.top_k == 2
    assert np.all(np.diff(t.probs, axis=-1) <= 0) and np.all(t.probs > 0)
    assert np.all(t.probs.sum(-1) <= 1 + 1e-5)


def test_meta_records_every_parameter_and_reproduces_the_trace():
    t = synthetic_routing(**SMALL, seed=5, n_seqs=7, burst_rate=0.01)
    assert t.meta["source"] == "synthetic"
    params = list(inspect.signature(synthetic_routing).parameters)
    assert set(params) <= set(t.meta) and t.meta["n_seqs"] == 7 == len(t.seq_starts)
    assert t.meta["n_bursts"] > 0
    again = synthetic_routing(**{p: t.meta[p] for p in params})
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(t, name), getattr(again, name))


def test_write_read_round_trip(tmp_path):
    t = synthetic_routing(**SMALL, seed=2)
    back = read_trace(write_trace(tmp_path / "synthetic.npz", t))
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(t, name), getattr(back, name))
    assert back.layers == t.layers and back.top_k == t.top_k and back.n_experts == t.n_experts
    assert back.meta == t.meta


@pytest.mark.parametrize("kw", [
    {"n_tokens": 1}, {"n_experts": 1, "top_k": 1}, {"n_experts": 5, "top_k": 5},
    {"temperature": 0.0, "zipf": 0.0, "token_affinity": 0.0}, {"burst_rate": 1.0, "burst_len": 3},
    {"phase_tokens": 1, "n_experts": 2, "top_k": 1}, {"n_seqs": 4096}, {"vocab": 1, "d_embed": 1},
])
def test_edge_cases_are_valid(kw):
    t = synthetic_routing(**{**SMALL, **kw}, seed=0).validate()
    assert len(t.seq_starts) == t.meta["n_seqs"]


def test_zipf_popularity_skews_each_layer():
    base = {**SMALL, "n_experts": 16, "n_tokens": 8192, "phase_tokens": 0, "burst_rate": 0.0}
    t = synthetic_routing(**base, seed=0)
    shares = [_top1_share(t, layer) for layer in range(t.n_layers)]
    assert min(shares) > 2 / t.n_experts
    flat, steep = (np.mean([_top1_share(synthetic_routing(**base, zipf=z, seed=0), layer)
                            for layer in range(t.n_layers)]) for z in (0.3, 2.0))
    assert steep > flat + 0.15


def test_routing_depends_on_the_token():
    args = {"n_tokens": 16384, "vocab": 64, "seed": 0}  # a small vocabulary keeps the estimates tight
    marginal, conditional = _entropies(synthetic_routing(**args))
    assert conditional < marginal - 0.3
    marginal_free, conditional_free = _entropies(synthetic_routing(**args, token_affinity=0.0))
    assert conditional < conditional_free
    assert marginal - conditional > marginal_free - conditional_free + 0.3  # mutual information


def test_noiseless_routing_is_a_function_of_token_and_previous_token():
    t = synthetic_routing(**SMALL, seed=0, temperature=0.0, burst_rate=0.0, phase_tokens=0)
    key = np.stack([t.tokens, np.concatenate([[-1], t.tokens[:-1]])], 1)
    key[t.seq_starts, 1] = -1  # no previous token at a sequence start
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(t.experts, t.experts[first[inverse.ravel()]])
    assert len(np.unique(t.experts[first, 0, 0])) > 1


def test_bursts_concentrate_experts_in_time():
    base = {**SMALL, "n_tokens": 16384, "phase_tokens": 0}
    bursty = synthetic_routing(**base, burst_rate=1 / 256, burst_len=128, seed=0)
    calm = synthetic_routing(**base, burst_rate=0.0, seed=0)
    assert bursty.meta["n_bursts"] > 20 and calm.meta["n_bursts"] == 0
    assert _burst_excess(bursty) > 1.5 * _burst_excess(calm)


def test_phase_shifts_change_popularity_over_time():
    base = {**SMALL, "n_tokens": 16384, "burst_rate": 0.0}
    shifting = synthetic_routing(**base, phase_tokens=1024, seed=0)
    steady = synthetic_routing(**base, phase_tokens=0, seed=0)
    assert shifting.meta["n_phase_shifts"] > 4 and steady.meta["n_phase_shifts"] == 0
    assert _half_drift(shifting) > 0.1 > 3 * _half_drift(steady)


@pytest.mark.parametrize("kw, name", [
    ({"n_tokens": 0}, "n_tokens"), ({"n_tokens": 2.5}, "n_tokens"), ({"n_layers": 0}, "n_layers"),
    ({"n_experts": 0}, "n_experts"), ({"n_experts": 40000}, "n_experts"),
    ({"top_k": 9}, "top_k"), ({"top_k": 0}, "top_k"), ({"seed": -1}, "seed"),
    ({"vocab": 0}, "vocab"), ({"d_embed": 0}, "d_embed"), ({"n_seqs": 4097}, "n_seqs"),
    ({"n_seqs": -1}, "n_seqs"), ({"zipf": -0.1}, "zipf"), ({"zipf": float("nan")}, "zipf"),
    ({"token_affinity": -1.0}, "token_affinity"), ({"temperature": -0.5}, "temperature"),
    ({"temperature": float("inf")}, "temperature"), ({"burst_rate": -0.01}, "burst_rate"),
    ({"burst_rate": 1.5}, "burst_rate"), ({"burst_rate": "high"}, "burst_rate"),
    ({"burst_len": 0}, "burst_len"), ({"burst_boost": -3.0}, "burst_boost"),
    ({"phase_tokens": -1}, "phase_tokens"), ({"n_layers": True}, "n_layers"),
])
def test_bad_arguments_raise_a_one_line_error_naming_them(kw, name):
    with pytest.raises(ValueError, match=rf"^synthetic_routing: {name} must be ") as info:
        synthetic_routing(**{**SMALL, **kw})
    assert "\n" not in str(info.value)
