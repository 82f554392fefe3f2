"""KV-cache slot selection (edge_jax.infer.kv_select): SnapKV pooling and top-k, PyramidKV budgets,
StreamingLLM slots and the per-group gathers, against the NumPy loop references beside them
(``*_reference`` in edge_jax.infer.kv_select) on random inputs."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.infer import kv_select as sel

# ---------------------------------------------------------------- helpers (the references are in kv_select)


def random_votes(rng, B, G, S, dtype=jnp.float32):
    """Softmax of random normals summed over a few 'queries': strictly positive, no accidental ties."""
    logits = rng.normal(size=(B, G, 4, S)) * 2.0
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return jnp.asarray((p / p.sum(-1, keepdims=True)).sum(2), dtype)


def prefix_valid(n_B, S):
    return np.arange(S)[None, :] < np.asarray(n_B)[:, None]


@functools.partial(jax.jit, static_argnames="configs")
def snapkv_many(votes, valid, configs):
    """One compiled program for several (budget, window, kernel, kind) configs (keeps the tests fast)."""
    return [sel.snapkv_indices(votes, valid, *c) for c in configs]


def check_snapkv(votes, valid, configs):
    for c, (idx, ok) in zip(configs, snapkv_many(votes, jnp.asarray(valid), configs)):
        assert idx.shape == ok.shape == votes.shape[:2] + (c[0],), c
        assert idx.dtype == jnp.int32 and ok.dtype == jnp.bool_
        ridx, rok = sel.snapkv_indices_reference(votes, valid, *c)
        np.testing.assert_array_equal(ok, rok, err_msg=str(c))
        np.testing.assert_array_equal(idx, ridx, err_msg=str(c))


@functools.partial(jax.jit, static_argnames="configs")
def pool_many(v, mask, configs):
    return [(sel.pool_votes(v, k, kind), sel.pool_votes(v, k, kind, mask=mask)) for k, kind in configs]

# ---------------------------------------------------------------- pool_votes


POOL_CONFIGS = tuple((k, kind) for k in (1, 3, 5, 7) for kind in ("max", "avg"))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_pool_votes_matches_reference(dtype):
    rng = np.random.default_rng(1)
    v = random_votes(rng, 2, 3, 11, dtype)
    mask = rng.random((2, 1, 11)) < 0.7
    vn = np.asarray(v, np.float32)
    tol = 1e-6 if dtype == jnp.float32 else 1e-2  # bf16 output: avg is rounded back to bf16
    for (kernel, kind), (out, out_m) in zip(POOL_CONFIGS, pool_many(v, jnp.asarray(mask), POOL_CONFIGS)):
        assert out.dtype == out_m.dtype == dtype
        out, out_m = np.asarray(out, np.float32), np.asarray(out_m, np.float32)
        want = np.asarray(sel.pool_votes_reference(vn, kernel, kind), np.float32)
        want_m = np.asarray(sel.pool_votes_reference(vn, kernel, kind, mask), np.float32)
        np.testing.assert_allclose(out, want, rtol=tol)
        np.testing.assert_allclose(out_m, want_m, rtol=tol)
    assert sel.pool_votes(v, 1, "avg") is v  # kernel 1 returns the input


def test_pool_votes_edges_ignore_padding():
    v = -jnp.array([[[3.0, 1.0, 1.0, 1.0, 6.0]]])  # all negative: a zero-padded max would give 0 at the edges
    (avg, _), (mx, _), (mx1, _) = pool_many(v, None, ((3, "avg"), (3, "max"), (1, "max")))
    # avg over the real entries only: slot 0 -> -(3+1)/2 with kernel 3, not -(3+1)/3
    np.testing.assert_allclose(avg[0, 0], [-2.0, -5 / 3, -1.0, -8 / 3, -3.5], rtol=1e-6)
    np.testing.assert_array_equal(mx[0, 0], [-1.0, -1.0, -1.0, -1.0, -1.0])
    np.testing.assert_array_equal(mx1[0, 0], v[0, 0])


@pytest.mark.parametrize("kernel,kind", [(4, "max"), (0, "max"), (-3, "avg"), (3, "mean")])
def test_pool_votes_errors(kernel, kind):
    with pytest.raises(ValueError, match="kernel|kind"):
        sel.pool_votes(jnp.ones((1, 1, 4)), kernel, kind)

# ---------------------------------------------------------------- snapkv_indices


SNAP_CONFIGS = (  # budget, window, kernel, kind
    (12, 4, 7, "max"), (16, 8, 5, "avg"), (10, 0, 3, "max"), (6, 6, 7, "avg"), (30, 4, 1, "max"),  # 30 > S
    (9, 3, 3, "avg"),
)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_snapkv_matches_reference(dtype):
    rng = np.random.default_rng(2)
    B, G, S = 6, 3, 24
    votes = random_votes(rng, B, G, S, dtype)  # bf16 rounding also makes some exact ties
    # a full row, rows shorter than some budgets, shorter than some windows, and an empty row
    check_snapkv(votes, prefix_valid([24, 20, 11, 5, 1, 0], S), SNAP_CONFIGS)


def test_snapkv_ties_break_to_lower_index():
    # integer votes: many exact ties both before and after pooling (sums of small ints are exact)
    rng = np.random.default_rng(7)
    B, G, S = 3, 2, 30
    votes = jnp.asarray(rng.integers(1, 4, size=(B, G, S)), jnp.float32)
    configs = tuple((10, 3, k, kind) for k in (1, 3, 5) for kind in ("max", "avg"))
    check_snapkv(votes, prefix_valid([S, 25, 18], S), configs)
    # all-equal votes: the lowest candidate indices win
    for idx, ok in snapkv_many(jnp.ones((1, 1, 12)), None, ((5, 2, 3, "max"), (5, 2, 3, "avg"))):
        np.testing.assert_array_equal(idx[0, 0], [0, 1, 2, 10, 11])
        assert bool(ok.all())


def test_snapkv_pooling_changes_the_choice():
    # one spike at slot 5: kernel 1 keeps slot 5 only; kernel 3 max-pools it onto 4 and 6 too
    v = jnp.full((1, 1, 16), 0.01).at[0, 0, 5].set(1.0)
    (idx1, _), (idx3, _) = snapkv_many(v, None, ((4, 1, 1, "max"), (4, 1, 3, "max")))
    np.testing.assert_array_equal(idx1[0, 0], [0, 1, 5, 15])
    np.testing.assert_array_equal(idx3[0, 0], [4, 5, 6, 15])


def test_snapkv_properties_and_jit():
    rng = np.random.default_rng(3)
    B, G, S, budget, window = 5, 3, 48, 14, 5
    votes = random_votes(rng, B, G, S)
    n_B = np.array([48, 30, 14, 9, 3])
    valid = jnp.asarray(prefix_valid(n_B, S))
    [(idx, ok)] = snapkv_many(votes, valid, ((budget, window, 7, "avg"),))
    idx_e, ok_e = sel.snapkv_indices(votes, valid, budget, window, 7, "avg")  # eager, no jit
    np.testing.assert_array_equal(idx, idx_e)
    np.testing.assert_array_equal(ok, ok_e)
    idx, ok = np.asarray(idx), np.asarray(ok)
    for b in range(B):
        n = n_B[b]
        for g in range(G):
            kept = idx[b, g][ok[b, g]]
            assert len(kept) == min(n, budget)
            assert np.all(np.diff(kept) > 0)  # sorted, unique
            assert np.all(kept < n)
            assert set(range(max(n - window, 0), n)) <= set(kept.tolist())  # observation window kept
            assert ok[b, g, :len(kept)].all() and np.all(idx[b, g][~ok[b, g]] == 0)  # real first, pad -> 0
    # different groups see different votes, so they keep different slots
    assert not all(np.array_equal(idx[0, 0], idx[0, g]) for g in range(G))


@pytest.mark.parametrize("budget,window,kernel,kind", [(0, 0, 7, "max"), (4, 5, 7, "max"), (4, -1, 7, "max"),
                                                       (4, 2, 2, "max"), (4, 2, 3, "sum")])
def test_snapkv_errors(budget, window, kernel, kind):
    with pytest.raises(ValueError):
        sel.snapkv_indices(jnp.ones((1, 1, 8)), None, budget, window, kernel, kind)

# ---------------------------------------------------------------- pyramid_budgets


@pytest.mark.parametrize("n_layers,avg,window,beta", [(2, 64, 8, 20.0), (28, 128, 32, 20.0), (5, 11, 8, 20.0),
                                                      (7, 40, 8, 3.0), (32, 2048, 32, 20.0), (3, 10, 0, 2.5)])
def test_pyramid_budgets(n_layers, avg, window, beta):
    bud = sel.pyramid_budgets(n_layers, avg, window, beta)
    assert len(bud) == n_layers and all(isinstance(x, int) for x in bud)
    assert sum(bud) == n_layers * avg
    assert all(a >= b for a, b in itertools.pairwise(bud))
    assert bud[0] > bud[-1]
    assert min(bud) >= window + 1
    # close to the exact linear schedule (away from the >= window + 1 floor)
    k = avg - window
    k_top, k_0 = k / beta, 2 * k - k / beta
    if k_top >= 1:
        exact = [k_0 - (k_0 - k_top) * l / (n_layers - 1) + window for l in range(n_layers)]
        assert max(abs(a - e) for a, e in zip(bud, exact)) < 1.0 + 1e-9


def test_pyramid_budgets_known_values_and_uniform():
    # k = 10, top 10/5 = 2, bottom 18, step 4: [18, 14, 10, 6, 2] + 4
    assert sel.pyramid_budgets(5, 14, 4, beta=5.0) == [22, 18, 14, 10, 6]
    assert sel.pyramid_budgets(6, 100, 16, beta=1.0) == [100] * 6
    assert sel.pyramid_budgets(1, 77, 8) == [77]
    assert sel.pyramid_budgets(4, 10, 8, beta=20.0) == [11, 11, 9, 9]  # k = 2: floor raised to one slot


@pytest.mark.parametrize("args", [(4, 8, 8, 20.0), (4, 5, 8, 20.0), (4, 64, 8, 0.5), (0, 64, 8, 20.0),
                                  (4, 64, -1, 20.0)])
def test_pyramid_budgets_errors(args):
    with pytest.raises(ValueError):
        sel.pyramid_budgets(*args)

# ---------------------------------------------------------------- gathers


@jax.jit
def gather_all(k, extra, pos, pos_shared, idx):
    return (sel.gather_kv(k, idx), sel.gather_kv(extra, idx), sel.gather_per_group(pos, idx),
            sel.gather_per_group(pos_shared, idx))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_gather_kv_and_per_group(dtype):
    rng = np.random.default_rng(5)
    B, S, G, K, N = 2, 13, 3, 4, 6
    k = jnp.asarray(rng.normal(size=(B, S, G, K)), dtype)
    extra = jnp.asarray(rng.normal(size=(B, S, G, 2, K)), dtype)  # trailing dims after G
    pos = jnp.asarray(rng.integers(0, 1000, size=(B, G, S)), jnp.int32)
    pos_shared = jnp.asarray(rng.integers(0, 1000, size=(B, S)), jnp.int32)  # [B, S]: shared by the groups
    idx = rng.integers(0, S, size=(B, G, N))
    out, out_x, got, got_s = gather_all(k, extra, pos, pos_shared, jnp.asarray(idx, jnp.int32))
    assert out.shape == (B, N, G, K) and out_x.shape == (B, N, G, 2, K) and out.dtype == dtype
    assert got.shape == got_s.shape == (B, G, N)
    k, extra, pos, pos_shared = map(np.asarray, (k, extra, pos, pos_shared))
    out, out_x, got, got_s = map(np.asarray, (out, out_x, got, got_s))
    for b in range(B):
        for g in range(G):
            for n in range(N):
                np.testing.assert_array_equal(out[b, n, g], k[b, idx[b, g, n], g])
                np.testing.assert_array_equal(out_x[b, n, g], extra[b, idx[b, g, n], g])
                assert got[b, g, n] == pos[b, g, idx[b, g, n]]
                assert got_s[b, g, n] == pos_shared[b, idx[b, g, n]]


def test_snapkv_then_gather_end_to_end():
    @jax.jit
    def run(votes, valid, cache):
        idx, ok = sel.snapkv_indices(votes, valid, 8, 2, 3, "avg")
        return idx, ok, sel.gather_kv(cache, idx)

    rng = np.random.default_rng(11)
    B, G, S, K = 2, 2, 20, 3
    valid = prefix_valid([20, 7], S)
    cache = np.broadcast_to(np.arange(S, dtype=np.float32)[None, :, None, None], (B, S, G, K))
    idx, ok, kept = run(random_votes(rng, B, G, S), jnp.asarray(valid), jnp.asarray(cache))
    # the cache value at slot s is s, so the kept values are the kept indices
    np.testing.assert_array_equal(np.asarray(kept)[..., 0], np.swapaxes(np.asarray(idx), 1, 2))
    assert int(ok[1].sum()) == G * 7 and int(ok[0].sum()) == G * 8

# ---------------------------------------------------------------- streaming_indices


@functools.partial(jax.jit, static_argnames=("configs", "S"))
def streaming_many(n_B, configs, S):
    return [sel.streaming_indices(n_B, sink, recent, S) for sink, recent in configs]


def test_streaming_matches_reference():
    S, configs = 24, ((4, 8), (0, 5), (3, 0), (1, 1))
    n = np.array([24, 20, 13, 12, 11, 5, 1, 0, 30])  # 30 > S is clipped to S
    for (sink, recent), (idx, ok) in zip(configs, streaming_many(jnp.asarray(n), configs, S)):
        ridx, rok = sel.streaming_indices_reference(n, sink, recent, S)
        assert idx.shape == (len(n), sink + recent) and idx.dtype == jnp.int32
        np.testing.assert_array_equal(ok, rok, err_msg=str((sink, recent)))
        np.testing.assert_array_equal(idx, ridx, err_msg=str((sink, recent)))
        for b in range(len(n)):
            assert np.all(np.diff(np.asarray(idx[b])[np.asarray(ok[b])]) > 0)


def test_streaming_eager_matches_jit():
    n = jnp.array([30, 9, 3])
    [(idx, ok)] = streaming_many(n, ((2, 4),), 32)
    idx_e, ok_e = sel.streaming_indices(n, 2, 4, 32)
    np.testing.assert_array_equal(idx, idx_e)
    np.testing.assert_array_equal(ok, ok_e)
    np.testing.assert_array_equal(idx_e[0], [0, 1, 26, 27, 28, 29])


def test_streaming_errors():
    for sink, recent in [(0, 0), (-1, 4), (4, -1)]:
        with pytest.raises(ValueError):
            sel.streaming_indices(jnp.array([10]), sink, recent, 16)
