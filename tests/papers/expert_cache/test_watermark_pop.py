"""The watermark_pop policy: invariants on random traces, its RAM score, the RAM decision that differs
from the paper's watermark policy, and its config keys."""
import numpy as np
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.papers.expert_cache.engine import Simulator
from edge_jax.papers.expert_cache.experiment import make_policy, run_experiment
from edge_jax.papers.expert_cache.profile import DeviceProfile
from edge_jax.papers.expert_cache.synthetic import synthetic_routing
from edge_jax.papers.expert_cache.watermark import Watermark
from edge_jax.papers.expert_cache.watermark_pop import WatermarkPop

SMALL = {"synthetic.n_tokens": 1024, "synthetic.d_embed": 16, "synthetic.phase_tokens": 512}


def profile(n_layers, n_experts, sizes=None, credit=0.0):
    sizes = np.ones(n_layers * n_experts) if sizes is None else np.asarray(sizes, float)
    return DeviceProfile("test", n_layers, n_experts, sizes, 1.0 * sizes, 10.0 * sizes, credit, credit)


def trace(seed, n_tokens=300, n_layers=3, n_experts=8, top_k=2):
    return synthetic_routing(n_tokens, n_layers, n_experts, top_k, seed=seed, vocab=32, d_embed=4,
                             phase_tokens=100, burst_rate=0.01, burst_len=20).experts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_hold_on_random_traces(seed):
    """Containment, capacities, residency of A_t and byte books after every step (check=True), with mixed
    sizes and prefetching, fused with ScoutGate and EWMA-only."""
    experts = trace(seed)
    rng = np.random.default_rng(seed)
    prof = profile(3, 8, sizes=rng.uniform(0.5, 1.5, 24), credit=0.7)
    scout = rng.uniform(0.05, 0.95, (len(experts), 3, 8))
    for cap_g, cap_r in ((4.0, 9.0), (7.5, 14.0)):
        for pol in (WatermarkPop(eta=0.5, scout=scout), WatermarkPop(eta=0.0, pop_mix=0.0)):
            st = Simulator(prof, cap_g, cap_r, check=True).run(experts, pol)
            assert st.hits_g + st.hits_r + st.misses == st.accesses == experts.size
            assert st.prefetch_bytes_g > 0 and st.stall_s > 0


def test_ram_score_is_slow_popularity_plus_mixed_benefit():
    experts = trace(3, n_tokens=200)
    n, L, k = experts.shape
    prof = profile(L, 8)
    scout = np.random.default_rng(3).uniform(0.05, 0.95, (n, L, 8))
    pol = WatermarkPop(eta=0.5, scout=scout, pop_alpha=0.05, pop_mix=0.7)
    Simulator(prof, 5, 12).run(experts, pol)
    pop = np.full((L, 8), k / 8)                  # the slow EWMA, recomputed on the layer-local clock
    for i in range(n):
        for layer in range(L):
            pop[layer] *= 0.95
            pop[layer, experts[i, layer]] += 0.05
    np.testing.assert_allclose(pol.pop, pop, rtol=1e-12)
    want = pop.reshape(-1) * prof.cost_r / prof.sizes + 0.7 * pol.b["ram"]
    np.testing.assert_allclose(pol.priority("ram"), want, rtol=1e-12)
    assert pol.priority("vram") is pol.b["vram"]


def test_ram_keeps_the_long_run_popular_expert_the_watermark_evicts():
    # One layer, 4 experts, top-1; VRAM 1 expert, RAM 3, no prefetch. Expert 0 runs 300 times, then
    # expert 1 forty times, then 2, 3, 0. When 3 arrives RAM must drop 0 or 1 (2 is in VRAM): the
    # watermark's fast EWMA has forgotten 0 (b^R of 0 < 1), the slow one has not, so only watermark_pop
    # serves the last access of 0 from RAM (cost 1) instead of NVMe (cost 11).
    experts = np.array([0] * 300 + [1] * 40 + [2, 3, 0])[:, None, None]
    prof = profile(1, 4)
    base = Simulator(prof, 1, 3, check=True).run(experts, Watermark("watermark", eta=0.0))
    pop = Simulator(prof, 1, 3, check=True).run(experts, WatermarkPop(eta=0.0))
    assert (base.misses, base.hits_r) == (5, 0)
    assert (pop.misses, pop.hits_r) == (4, 1)
    assert pop.stall_s == pytest.approx(base.stall_s - 10.0)


def test_config_keys_build_the_policy_and_bad_values_fail(tmp_path):
    c = load_config("configs/cache.py:trace=synthetic,policy=watermark_pop",
                    {**SMALL, "predictor.eta": 0.0, "predictor.pop_alpha": 0.01, "predictor.pop_mix": 0.5,
                     "predictor.pop_gamma": 0.25, "trace.max_tokens": 200})
    pol = make_policy(c, None)
    assert isinstance(pol, WatermarkPop) and (pol.pop_alpha, pol.pop_mix, pol.gamma) == (0.01, 0.5, 0.25)
    m = run_experiment(c, tmp_path / "pop", log=lambda s: None)
    assert m["tokens"] == 200 and m["stall_ms_per_token"] > 0
    for key, value in (("pop_alpha", 0.0), ("pop_alpha", 1.5), ("pop_mix", -0.1), ("pop_gamma", -1.0)):
        with pytest.raises(ConfigError, match=f"predictor.pop_alpha in .0, 1.*{value}"):
            load_config("configs/cache.py:trace=synthetic,policy=watermark_pop", {f"predictor.{key}": value})
    with pytest.raises(ValueError, match="pop_alpha"):
        WatermarkPop(pop_alpha=0.0, eta=0.0)
