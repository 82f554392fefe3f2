"""Flash-decoding's shared pieces (edge_jax.layers.kernels.flash_decoding): attention split over independent runs
of the cache, each reduced to (unnormalised output, running max, running sum) and merged by ``merge_runs``, against
plain softmax attention over the whole cache (float64 numpy), with empty runs, rows of different lengths, and the
output in float32 and bfloat16."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.layers.kernels.flash_decoding import MASKED, merge_runs

TOL = {"float32": 1e-5, "bfloat16": 1e-2}  # relative to the output's largest entry: float32 sums, bf16 rounding


def _case(seed, B=3, H=2, S=48, C=16):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, H, C)).astype(np.float32)
    k = rng.normal(size=(B, S, C)).astype(np.float32)
    v = rng.normal(size=(B, S, C)).astype(np.float32)
    lengths = np.array([S, 1, *rng.integers(2, S, B - 2)])[:B]  # a full row, a one-slot row, random ones
    return q, k, v, lengths


def _plain(q, k, v, lengths):
    """softmax(q k^T / sqrt(C)) v over each row's first ``length`` slots, float64."""
    s = np.einsum("bhc,bsc->bhs", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(q.shape[-1])
    valid = np.arange(k.shape[1])[None, None, :] < lengths[:, None, None]
    p = np.where(valid, np.exp(s - np.where(valid, s, -np.inf).max(-1, keepdims=True)), 0.0)
    return np.einsum("bhs,bsc->bhc", p / p.sum(-1, keepdims=True), v.astype(np.float64))


def _runs(q, k, v, lengths, U):
    """Each of ``U`` equal runs of the cache reduced as a split decode step does (float32 numpy): the masked slots
    score MASKED, ``m`` is the run's max score, ``l`` and ``o`` its sums of exp(s - m) and exp(s - m) v over the
    valid slots; shaped [B, U, H, C] and [B, U, H, 1] as merge_runs takes them."""
    B, S, C = k.shape
    s = np.einsum("bhc,bsc->bhs", q, k) / np.float32(np.sqrt(C))
    valid = np.arange(S)[None, None, :] < lengths[:, None, None]
    s = np.where(valid, s, np.float32(MASKED)).reshape(B, q.shape[1], U, S // U)
    m = s.max(-1)
    with np.errstate(over="ignore"):  # exp(MASKED - m) of a masked slot overflows where it is discarded
        p = np.where(valid.reshape(B, 1, U, S // U), np.exp(s - m[..., None]), np.float32(0)).astype(np.float32)
    o = np.einsum("bhus,busc->bhuc", p, v.reshape(B, U, S // U, C))
    return o.transpose(0, 2, 1, 3), m.transpose(0, 2, 1)[..., None], p.sum(-1).transpose(0, 2, 1)[..., None]


merge = jax.jit(merge_runs, static_argnums=3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("U", [1, 3, 6])
def test_merged_runs_equal_plain_attention(dtype, U):
    q, k, v, lengths = _case(U)
    o, m, s = _runs(q, k, v, lengths, U)
    assert bool((m == MASKED).any()) == (U > 1)  # with several runs the short rows leave runs empty
    got = merge(o, m, s, jnp.dtype(dtype))
    want = _plain(q, k, v, lengths)
    assert got.dtype == jnp.dtype(dtype) and got.shape == want.shape
    err = np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max()
    assert err < TOL[dtype], err


def test_the_merge_does_not_depend_on_the_runs_order():
    q, k, v, lengths = _case(7)
    o, m, s = _runs(q, k, v, lengths, 4)
    order = np.random.default_rng(0).permutation(4)
    got = merge(o[:, order], m[:, order], s[:, order], jnp.float32)
    np.testing.assert_allclose(got, merge(o, m, s, jnp.float32), rtol=1e-6, atol=1e-6)


def test_an_empty_run_weighs_nothing():
    """Appending runs with m = MASKED, l = 0, o = 0 (the documented empty run) leaves the merge as it was."""
    q, k, v, lengths = _case(3)
    o, m, s = _runs(q, k, v, lengths, 2)
    empty = (np.zeros_like(o[:, :1]), np.full_like(m[:, :1], MASKED), np.zeros_like(s[:, :1]))
    got = merge(*(np.concatenate([a, e, e], axis=1) for a, e in zip((o, m, s), empty)), jnp.float32)
    np.testing.assert_array_equal(got, merge(o, m, s, jnp.float32))


def test_masked_is_the_float32_minimum_and_vanishes_under_exp():
    assert MASKED == float(np.finfo(np.float32).min)
    m = jnp.asarray(np.random.default_rng(0).normal(scale=30.0, size=64), jnp.float32)
    assert float(jnp.exp(jnp.float32(MASKED) - m).max()) == 0.0
