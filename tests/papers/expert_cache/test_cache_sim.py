"""The two-tier cache simulator, its demand policies, the watermark policy and Belady's bound."""
import itertools

import numpy as np
import pytest

from edge_jax.papers.expert_cache.belady import belady, min_misses, next_use
from edge_jax.papers.expert_cache.engine import Simulator, object_ids
from edge_jax.papers.expert_cache.policies import FIFO, LFU, LRU
from edge_jax.papers.expert_cache.profile import DeviceProfile
from edge_jax.papers.expert_cache.synthetic import synthetic_routing
from edge_jax.papers.expert_cache.watermark import Watermark


def profile(n_layers, n_experts, cost_g=1.0, cost_r=10.0, sizes=None, credit=0.0):
    n = n_layers * n_experts
    sizes = np.ones(n) if sizes is None else np.asarray(sizes, float)
    return DeviceProfile("test", n_layers, n_experts, sizes, cost_g * sizes, cost_r * sizes, credit, credit)


def trace(seed, n_tokens=300, n_layers=3, n_experts=8, top_k=2):
    return synthetic_routing(n_tokens, n_layers, n_experts, top_k, seed=seed, vocab=32, d_embed=4,
                             phase_tokens=100, burst_rate=0.01, burst_len=20).experts


def online_policies(scout=None):
    out = [FIFO(), LRU(), LFU(), Watermark("ewma", eta=0.0)]
    if scout is not None:
        out += [Watermark("scoutgate", eta=1.0, scout=scout), Watermark("watermark", eta=0.5, scout=scout)]
    return out


def test_hand_computed_lru_stall():
    # L=2 layers x E=2 experts, top-1; objects 0,1 (layer 0) and 2,3 (layer 1); VRAM 1 expert, RAM 2.
    experts = np.array([[[0], [0]], [[0], [1]], [[1], [1]]])   # accesses 0, 2, 0, 3, 1, 3
    st = Simulator(profile(2, 2), cap_g=1, cap_r=2, check=True).run(experts, LRU())
    # t0 0: NVMe 11 | t1 2: NVMe 11 | t2 0: RAM 1 | t3 3: NVMe 11 (RAM evicts 2, not VRAM's 0)
    # t4 1: NVMe 11 (RAM evicts 0; 3 is in VRAM) | t5 3: RAM 1
    assert st.stall_s == pytest.approx(46.0)
    assert (st.hits_g, st.hits_r, st.misses) == (0, 2, 4)
    assert (st.bytes_g, st.bytes_r) == (6.0, 4.0)
    bound, info = belady(experts, profile(2, 2), 1, 2)
    assert bound.stall_s == pytest.approx(46.0) and info == {"exact": True, "containment_violations": 0}


def test_fifo_lru_lfu_differ_as_defined():
    experts = np.array([0, 1, 0, 2, 0])[:, None, None]          # one layer, 3 experts, top-1; VRAM 2
    prof = profile(1, 3, cost_r=0.0)
    misses = {p.name: 5 - Simulator(prof, 2, 3, check=True).run(experts, p).hits_g for p in (FIFO(), LRU(), LFU())}
    assert misses == {"fifo": 4, "lru": 3, "lfu": 3}           # FIFO evicts the re-used 0 at the access of 2
    lfu_trace = np.array([0, 0, 1, 2, 0])[:, None, None]         # LFU keeps 0 (count 2) over the more recent 1
    assert Simulator(prof, 2, 3).run(lfu_trace, LFU()).hits_g == 2
    assert Simulator(prof, 2, 3).run(lfu_trace, LRU()).hits_g == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_hold_on_random_traces(seed):
    """Containment, capacities, residency of A_t and byte books after every step, with mixed sizes and
    prefetching (the engine asserts them with check=True)."""
    experts = trace(seed)
    rng = np.random.default_rng(seed)
    sizes = rng.uniform(0.5, 1.5, 24)
    prof = profile(3, 8, sizes=sizes, credit=0.7)
    scout = rng.uniform(0.05, 0.95, (len(experts), 3, 8))
    for cap_g, cap_r in ((4.0, 9.0), (7.5, 14.0)):
        for pol in online_policies(scout):
            st = Simulator(prof, cap_g, cap_r, check=True).run(experts, pol)
            assert st.hits_g + st.hits_r + st.misses == st.accesses == experts.size
            assert st.stall_s > 0 and st.bytes_r <= st.bytes_g + 1e-9 + st.prefetch_bytes_r


@pytest.mark.parametrize("seed", [3, 4])
def test_belady_bounds_every_demand_policy(seed):
    experts = trace(seed, n_tokens=400)
    prof = profile(3, 8)
    scout = np.random.default_rng(seed).uniform(0.05, 0.95, (len(experts), 3, 8))
    for cap_g, cap_r in ((3, 8), (6, 12), (10, 20)):
        bound, info = belady(experts, prof, cap_g, cap_r)
        assert info == {"exact": True, "containment_violations": 0}
        for pol in online_policies(scout):       # no prefetch credit: every policy fetches on demand
            st = Simulator(prof, cap_g, cap_r).run(experts, pol)
            assert bound.stall_s <= st.stall_s + 1e-9, pol.name
            assert bound.hits_g >= st.hits_g and bound.misses <= st.misses, pol.name


def _optimal_misses(seq, cap):
    """Exhaustive optimum of single-tier demand paging (uniform sizes, k = 1) by search over cache states."""
    states = {frozenset(): 0}
    for o in seq:
        nxt = {}
        for cache, cost in states.items():
            if o in cache:
                options = [(cache, cost)]
            elif len(cache) < cap:
                options = [(cache | {o}, cost + 1)]
            else:
                options = [((cache - {v}) | {o}, cost + 1) for v in cache]
            for c, v in options:
                nxt[c] = min(nxt.get(c, 1 << 30), v)
        states = nxt
    return min(states.values())


@pytest.mark.parametrize("seed", range(4))
def test_min_is_optimal_against_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, 5, 14)
    objs = seq[:, None].astype(np.int64)
    for cap in (1, 2, 3):
        got = min_misses(objs, next_use(objs), np.ones(5), cap).sum()
        assert got == _optimal_misses(seq.tolist(), cap)


def test_next_use():
    objs = np.array([[0, 1], [2, 0], [1, 3]])
    assert next_use(objs).tolist() == [[1, 2], [3, 3], [3, 3]]


def test_watermark_ewma_and_reuse_weights():
    prof = profile(3, 4)
    pol = Watermark("ewma", eta=0.0, alpha=0.25, gamma=1.0, p0=0.5)
    sim = Simulator(prof, 4, 8)
    experts = np.array([[[0], [1], [2]], [[0], [3], [3]]])
    sim.run(experts[:1], pol)
    # Layer-local clock: each layer updated once, only its own row.
    want = np.full((3, 4), 0.5) * 0.75
    want[0, 0] += 0.25
    want[1, 1] += 0.25
    want[2, 2] += 0.25
    np.testing.assert_allclose(pol.ewma, want)
    # After the last layer of a token the next step is layer 0: D = 0, 1, 2 for layers 0, 1, 2.
    np.testing.assert_allclose(pol.weight[0], np.exp(-np.array([0.0, 1.0, 2.0])))
    np.testing.assert_allclose(pol.weight[1], np.exp(-np.array([2.0, 0.0, 1.0])))
    b = pol.b["vram"].reshape(3, 4)
    np.testing.assert_allclose(b, want * pol.weight[0][:, None] * 1.0)     # C^G / S = 1


def test_watermark_lambda_tracks_capacity():
    experts = trace(5, n_tokens=500)
    pol = Watermark("ewma", eta=0.0, step=0.5)
    Simulator(profile(3, 8, credit=1.0), 5, 12, check=True).run(experts, pol)
    assert pol.lam["vram"] > 0 and pol.lam["ram"] > 0
    # about as many experts are wanted as fit (the dual variable balanced occupancy against capacity)
    wanted = (pol.b["vram"] >= pol.lam["vram"]).sum()
    assert 2 <= wanted <= 10


def test_prefetch_needs_link_time():
    experts = trace(6)
    prof_idle, prof_busy = profile(3, 8, credit=0.0), profile(3, 8, credit=1.0)
    assert Simulator(prof_idle, 5, 12).run(experts, Watermark("ewma", eta=0.0)).prefetch_bytes_g == 0
    st = Simulator(prof_busy, 5, 12, check=True).run(experts, Watermark("ewma", eta=0.0))
    assert 0 < st.prefetch_bytes_g <= len(experts) * 3 * 1.0


def test_object_ids_and_bad_policy_args():
    assert object_ids(np.array([[[1, 0], [2, 3]]]), 4).tolist() == [[[1, 0], [6, 7]]]
    for kwargs, word in (({"eta": 1.5}, "eta"), ({"eta": 0.5}, "ScoutGate"), ({"eta": 0.0, "alpha": 0.0}, "alpha")):
        with pytest.raises(ValueError, match=word):
            Watermark(**kwargs)


def test_every_capacity_pair_feasible_at_minimum():
    """Capacity of exactly one layer's top-k bytes still runs (the step's experts fit, nothing else)."""
    experts = trace(7, n_tokens=50)
    for pol, (cg, cr) in itertools.product(online_policies(), ((2, 2), (2, 3))):
        Simulator(profile(3, 8), cg, cr, check=True).run(experts, pol)


@pytest.mark.parametrize("seed", [8, 9])
def test_one_size_eviction_path_matches_the_general_one(seed):
    """With one expert size the engine evicts victims one argmin at a time; the general path (sort by
    priority, RAM outside VRAM first, cumulative bytes) must choose the same experts."""
    experts = trace(seed, n_tokens=300)
    scout = np.random.default_rng(seed).uniform(0.05, 0.95, (len(experts), 3, 8))
    for pol_fast, pol_ref in zip(online_policies(scout), online_policies(scout)):
        fast = Simulator(profile(3, 8, credit=0.5), 4, 9, check=True)
        ref = Simulator(profile(3, 8, credit=0.5), 4, 9, check=True)
        ref.unit = 0.0                       # force the general path
        a, b = fast.run(experts, pol_fast), ref.run(experts, pol_ref)
        counts = ("hits_g", "hits_r", "misses", "bytes_g", "bytes_r")
        assert [getattr(a, k) for k in counts] == [getattr(b, k) for k in counts]
        assert a.stall_s == pytest.approx(b.stall_s, rel=1e-12) and np.array_equal(fast.in_g, ref.in_g)
