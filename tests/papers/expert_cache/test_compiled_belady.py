"""The numba twins of Belady's pieces (edge_jax.papers.expert_cache.compiled_belady) against the numpy functions
of belady.py: next use against a plain backward scan too, and MIN's misses identical (not close) on random traces
with one size and with mixed sizes, at capacities from one step's experts to all of them; a capacity below one
step's experts is the same error in both."""
import numpy as np
import pytest

from edge_jax.papers.expert_cache import belady, compiled_belady


def _trace(seed, n_steps, k, n_obj):
    """int64 [T, J]: ``k`` distinct objects per step, drawn with a skew (some objects much hotter than others)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_obj, 0.5))
    return np.stack([rng.choice(n_obj, k, replace=False, p=p) for _ in range(n_steps)]).astype(np.int64)


def _naive_next_use(objs):
    n_steps = len(objs)
    return np.array([[next((u for u in range(t + 1, n_steps) if o in objs[u]), n_steps) for o in row]
                     for t, row in enumerate(objs)], np.int64).reshape(objs.shape)


@pytest.mark.parametrize("seed, n_steps, k, n_obj", [(0, 1, 2, 4), (1, 40, 1, 6), (2, 60, 2, 9), (3, 80, 4, 12)])
def test_next_use_equals_numpy_and_a_plain_scan(seed, n_steps, k, n_obj):
    objs = _trace(seed, n_steps, k, n_obj)
    got = compiled_belady.next_use(objs)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, belady.next_use(objs))
    np.testing.assert_array_equal(got, _naive_next_use(objs))


def test_next_use_by_hand_and_of_an_empty_trace():
    objs = np.array([[0, 1], [2, 0], [1, 3]], np.int64)
    assert compiled_belady.next_use(objs).tolist() == [[1, 2], [3, 3], [3, 3]]
    assert compiled_belady.next_use(np.zeros((0, 2), np.int64)).shape == (0, 2)


@pytest.mark.parametrize("sized", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_min_misses_equal_numpy(seed, sized):
    n_obj, k = 12, 2
    objs = _trace(10 + seed, 120, k, n_obj)
    rng = np.random.default_rng(seed)
    sizes = rng.uniform(0.5, 2.0, n_obj) if sized else np.ones(n_obj)
    nxt = belady.next_use(objs)
    # from just above the largest step (the float sums of evictions need the margin) to every object
    step_max = max(sizes[row].sum() for row in objs) * (1 + 1e-9)
    misses = []
    for cap in np.linspace(step_max, sizes.sum() + 1e-9, 5):
        got = compiled_belady.min_misses(objs, nxt, sizes, float(cap))
        np.testing.assert_array_equal(got, belady.min_misses(objs, nxt, sizes, float(cap)))
        assert got[0].all() and got.dtype == np.bool_  # the first step finds an empty tier
        misses.append(int(got.sum()))
    assert misses[-1] == len(np.unique(objs))  # everything fits: only the first use of each object misses
    if not sized:  # one size: MIN is a stack algorithm, more capacity never misses more
        assert misses == sorted(misses, reverse=True) and misses[0] > misses[-1]


def test_a_capacity_below_one_step_is_the_same_error():
    objs = _trace(5, 20, 3, 8)
    nxt, sizes = belady.next_use(objs), np.ones(8)
    for fn in (compiled_belady.min_misses, belady.min_misses):
        with pytest.raises(AssertionError, match="MIN cannot make room"):
            fn(objs, nxt, sizes, 2.0)
