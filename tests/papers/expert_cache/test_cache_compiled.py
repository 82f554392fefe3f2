"""The compiled simulator and Belady (numba) against the reference (engine.Simulator, policies.py, watermark.py,
belady's numpy functions): stall, hits, misses, bytes and final watermarks must be identical, not close."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from edge_jax.data.routing_trace import read_trace
from edge_jax.papers.expert_cache.belady import belady
from edge_jax.papers.expert_cache.compiled_sim import has_kernel, simulate
from edge_jax.papers.expert_cache.compiled_tiers import pairwise_sum
from edge_jax.papers.expert_cache.config import base_config
from edge_jax.papers.expert_cache.engine import Simulator
from edge_jax.papers.expert_cache.inputs import split_trace
from edge_jax.papers.expert_cache.policies import FIFO, LFU, LRU
from edge_jax.papers.expert_cache.profile import build_profile, capacities
from edge_jax.papers.expert_cache.scoutgate import k_hot
from edge_jax.papers.expert_cache.synthetic import synthetic_routing
from edge_jax.papers.expert_cache.watermark import Watermark
from edge_jax.papers.expert_cache.watermark_pop import WatermarkPop

REAL = Path(__file__).resolve().parents[3] / "results" / "npumoe_traces"


def policies(scout):
    return [FIFO(), LRU(), LFU(), Watermark("ewma", eta=0.0), Watermark("scoutgate", eta=1.0, scout=scout),
            Watermark("watermark", eta=0.5, scout=scout), Watermark("wm_p0", eta=0.3, p0=0.2, gamma=0.0, step=0.5,
                                                                      hysteresis=0.0, alpha=0.3, scout=scout),
            WatermarkPop(eta=0.5, scout=scout), WatermarkPop(eta=0.0, pop_alpha=0.05, pop_mix=1.5, gamma=0.7, p0=0.1)]


def fields(stats):
    return {**dataclasses.asdict(stats), "wall_s": None}


def assert_identical(experts, prof, cap_g, cap_r, scout):
    """Every online policy and Belady, compiled vs reference, on one trace and capacity."""
    for ref_policy, fast_policy in zip(policies(scout), policies(scout)):
        assert has_kernel(fast_policy, prof)
        ref = Simulator(prof, cap_g, cap_r).run(experts, ref_policy)
        fast = simulate(experts, prof, cap_g, cap_r, fast_policy)
        assert fields(fast) == fields(ref), ref_policy.name
        assert getattr(fast_policy, "lam", None) == getattr(ref_policy, "lam", None), ref_policy.name
    ref_b, ref_extra = belady(experts, prof, cap_g, cap_r, compiled=False)
    fast_b, fast_extra = belady(experts, prof, cap_g, cap_r)
    assert fields(fast_b) == fields(ref_b) and fast_extra == ref_extra


def noisy_scout(experts, n_experts, seed=0):
    rng = np.random.default_rng(seed)
    return 0.6 * k_hot(experts, n_experts) + 0.4 * rng.random((*experts.shape[:2], n_experts), dtype=np.float32)


def profile_of(n_layers, n_experts, preset="pcie4-nvme", **profile):
    c = base_config()
    c.profile.preset = preset
    c.profile.update(profile)
    return build_profile(c.profile, n_layers, n_experts, seed=3)


def test_pairwise_sum_is_numpys_sum():
    rng = np.random.default_rng(0)
    for n in range(0, 129):
        a = rng.random(n + 3) * 10.0 ** rng.uniform(-4, 4, n + 3)
        assert pairwise_sum(a, 3, n) == a[3:].sum()


@pytest.mark.parametrize("case", [
    dict(vram=0.2, ram=0.6),                                   # the grids' capacity, one expert size
    dict(vram=0.1, ram=0.3, size_spread=0.3),                  # mixed sizes: eviction by sorted prefix
    dict(vram=0.3, ram=0.3, compute_ms=0.0),                   # VRAM = RAM, no link time to prefetch in
    dict(vram=0.5, ram=0.9, preset="phone", top_k=3, experts=6, layers=5),   # another device and shape
])
def test_compiled_equals_reference_on_synthetic_traces(case):
    case = dict(case)
    vram, ram = case.pop("vram"), case.pop("ram")
    layers, experts_n, k = case.pop("layers", 4), case.pop("experts", 16), case.pop("top_k", 2)
    experts = synthetic_routing(900, layers, experts_n, k, seed=1, vocab=64, d_embed=4, phase_tokens=300,
                                burst_rate=0.01, burst_len=40).experts
    prof = profile_of(layers, experts_n, **case)
    assert_identical(experts, prof, *capacities(prof, vram, ram, k), noisy_scout(experts, experts_n))


def test_compiled_equals_reference_with_ties():
    """A periodic trace (recency and count ties) and flat ScoutGate probabilities (equal densities): the
    lowest id must win every tie in both."""
    pattern = np.array([[[0, 1], [2, 3]], [[1, 2], [3, 0]], [[0, 1], [2, 3]], [[2, 3], [0, 1]]])
    experts = np.tile(pattern, (60, 1, 1))
    prof = profile_of(2, 4, expert_bytes=1000)
    flat = np.full((len(experts), 2, 4), 0.5, np.float32)
    assert_identical(experts, prof, *capacities(prof, 0.5, 0.75, 2), flat)
    assert_identical(experts, prof, *capacities(prof, 0.5, 0.75, 2), noisy_scout(experts, 4, seed=2))
    # a float64 forecast: eta x scout is then computed in float64, in the kernel as in numpy
    assert_identical(experts, prof, *capacities(prof, 0.5, 0.75, 2), noisy_scout(experts, 4, seed=3).astype(np.float64))


def test_policies_without_a_kernel_run_the_reference():
    class Recent(LRU):      # a subclass is a new policy: it must not run LRU's kernel
        pass

    experts = synthetic_routing(200, 2, 8, 2, seed=0, vocab=32, d_embed=4).experts
    prof = profile_of(2, 8)
    caps = capacities(prof, 0.3, 0.6, 2)
    assert not has_kernel(Recent(), prof)
    assert fields(simulate(experts, prof, *caps, Recent())) == fields(Simulator(prof, *caps).run(experts, Recent()))
    odd = dataclasses.replace(prof, sizes=prof.sizes + 0.5)      # not whole bytes: BLAS order, no kernel
    assert not has_kernel(LRU(), odd)


def real_eval(seed, max_tokens=0):
    trace = read_trace(REAL / f"seed{seed}" / "pystdlib_validation.npz")
    return split_trace(trace, 0.5, max_tokens)[1]


@pytest.mark.parametrize("vram", [0.2, 0.3])
def test_compiled_equals_reference_on_a_real_trace(vram):
    ev = real_eval(0, max_tokens=1500)
    prof = profile_of(ev.n_layers, ev.n_experts)
    assert_identical(ev.experts, prof, *capacities(prof, vram, 0.6, ev.top_k), noisy_scout(ev.experts, ev.n_experts))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_equals_reference_on_whole_real_traces(seed):
    """The grids' setting: each committed trace's whole held-out half, VRAM 10-50%."""
    ev = real_eval(seed)
    prof = profile_of(ev.n_layers, ev.n_experts)
    scout = noisy_scout(ev.experts, ev.n_experts, seed)
    for vram in (0.1, 0.2, 0.3, 0.4, 0.5):
        assert_identical(ev.experts, prof, *capacities(prof, vram, 0.6, ev.top_k), scout)


def test_compiled_ewma_history_equals_the_numpy_loop():
    from edge_jax.papers.expert_cache.experiment import ewma_probs
    experts = synthetic_routing(500, 3, 8, 2, seed=4, vocab=32, d_embed=4).experts
    for alpha, p0 in ((0.02, -1.0), (0.3, 0.1)):
        assert np.array_equal(ewma_probs(experts, 8, alpha, p0), ewma_probs(experts, 8, alpha, p0, compiled=False))


def test_a_long_trace_without_router_probabilities_splits():
    """The grids' real traces (pystdlib_train.npz) leave the router probabilities out."""
    trace = read_trace(REAL / "seed0" / "pystdlib_train.npz")
    assert trace.probs is None and trace.n_tokens == 1_048_576
    train, ev = split_trace(trace, 0.5)
    assert train.probs is None and train.n_tokens + ev.n_tokens == trace.n_tokens
