"""edge_jax.grid.power: the paired t-test's power, minimum detectable difference and seeds needed."""
import math

import pytest

from edge_jax.grid import power, verdicts


@pytest.mark.parametrize("delta,sd,n", [(1.3, 1.0, 3), (0.4, 0.7, 8), (-0.02, 0.013, 5), (2.5, 0.9, 2)])
def test_power_matches_a_simulation_of_the_test(delta, sd, n):
    exact = power.power(delta, sd, n, 0.05)
    simulated = power.power_by_simulation(delta, sd, n, 0.05, trials=40_000, seed=n)
    assert exact == pytest.approx(simulated, abs=0.012)   # binomial sd of 40k trials <= 0.0025


def test_seeds_needed_matches_published_sample_sizes():
    # paired t, two-sided alpha 0.05, 80 % power (G*Power's "means: difference from constant, matched pairs")
    for effect, n in ((1.0, 10), (0.8, 15), (0.5, 34), (0.2, 199)):
        assert power.seeds_needed(effect * 0.37, 0.37, 0.05) == n
    assert power.seeds_needed(-0.5, 1.0, 0.05) == 34        # the sign does not matter
    assert power.seeds_needed(0.0, 1.0, 0.05) is None        # no number of seeds finds no difference
    assert power.seeds_needed(0.01, 1.0, 0.05) is None       # more than MAX_SEEDS
    assert power.seeds_needed(0.3, 0.0, 0.05) == 2           # no spread: two seeds suffice


def test_min_detectable_is_where_the_power_reaches_80_percent():
    for n in (2, 3, 5, 8):
        mdd = power.min_detectable(0.05, n, 0.05)
        assert power.power(mdd, 0.05, n, 0.05) == pytest.approx(0.8, abs=1e-9)
        assert power.seeds_needed(mdd * 1.001, 0.05, 0.05) == n   # and n seeds are what that difference needs
    # fewer seeds see only larger differences: 3 seeds about 3.3 sd, 8 seeds about 1.2 sd
    assert power.min_detectable(1.0, 3, 0.05) == pytest.approx(3.264, abs=0.01)
    assert power.min_detectable(1.0, 8, 0.05) == pytest.approx(1.156, abs=0.01)
    assert power.min_detectable(0.0, 3, 0.05) == 0.0 and power.min_detectable(1.0, 1, 0.05) is None


def test_power_is_finite_where_scipys_noncentral_t_is_not():
    # scipy.stats.nct gives NaN at nc 7.6 and 55.5 for 1 df, and near nc 10 for 99 df
    delta = 7.6 / math.sqrt(2)
    assert power.power(delta, 1.0, 2, 0.05) == pytest.approx(power.power_by_simulation(delta, 1.0, 2, 0.05), abs=0.015)
    for n in (50, 100, 251, 600):
        p = power.power(1.0, 1.0, n, 0.05)
        assert math.isfinite(p) and p > 0.999


def test_paired_t_reports_power_beside_the_verdict():
    noisy = verdicts.paired_t([0.011, 0.008, 0.033])
    assert noisy.verdict == "within noise"
    sd = math.sqrt(sum((x - noisy.mean) ** 2 for x in [0.011, 0.008, 0.033]) / 2)
    assert noisy.sd == pytest.approx(sd)
    assert noisy.min_detectable == pytest.approx(power.min_detectable(sd, 3, 0.05))
    assert noisy.seeds_needed == power.seeds_needed(noisy.mean, sd, 0.05) == 8
    assert noisy.needs_text == "8"
    significant = verdicts.paired_t([1.0, 1.1, 0.9, 1.05])
    assert significant.seeds_needed is None and significant.needs_text == "—"
    assert verdicts.paired_t([0.0, 0.0, 0.0]).needs_text == "never"
    assert verdicts.paired_t([1e-4, -1e-4, 1e-5]).needs_text == f"> {power.MAX_SEEDS}"
    assert verdicts.paired_t([1.0]).min_detectable is None
