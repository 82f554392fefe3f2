"""How much a paired t-test over seeds can see: the power of :func:`edge_jax.grid.verdicts.paired_t`.

For paired differences with true mean ``delta`` and standard deviation ``sd`` over ``n`` seeds, the test
statistic follows a noncentral t with ``n - 1`` degrees of freedom and noncentrality
``delta * sqrt(n) / sd``; the two-sided test at ``alpha`` rejects when ``|t|`` passes the central t's
``1 - alpha / 2`` quantile. From that:

- :func:`min_detectable`: the smallest true mean difference the test finds with probability ``power``
  (80 %) at ``n`` seeds, given the spread ``sd`` (the observed spread of the pair's differences);
- :func:`seeds_needed`: the fewest seeds at which an observed mean difference, with the observed
  spread, would be found with that probability.

Both take the observed spread as the true one. With 3 seeds that estimate is itself rough (its 95 %
interval runs from 0.52 to 6.3 times the estimate), so the seeds a pair needs are a plan for the
next run, not a promise. :func:`power_by_simulation` is the naive reference the tests hold these to.
"""
from __future__ import annotations

import functools
import math

import numpy as np

POWER = 0.8
MAX_SEEDS = 1000  # seeds_needed gives up here (returns None: more than this)


def power(delta: float, sd: float, n: int, alpha: float) -> float:
    """The probability that the two-sided paired t-test at ``alpha`` rejects, for ``n`` differences
    drawn from a normal with mean ``delta`` and standard deviation ``sd`` > 0.

    The statistic is ``(Z + nc) / S`` with ``Z`` standard normal, ``nc = delta sqrt(n) / sd`` and
    ``S = sqrt(chi2_df / df)``, so the test rejects with probability ``E_S[Phi(nc - c S) + Phi(-nc - c S)]``
    (``c`` the critical value): integrated here over the quantiles of ``S`` (scipy's noncentral t
    returns NaN at scattered noncentralities)."""
    from scipy import special
    df = n - 1
    crit = t_quantile(1.0 - alpha / 2.0, df)
    nc = abs(delta) * math.sqrt(n) / sd
    s, w = _quantile_nodes(df)
    return min(1.0, float(np.sum(w * (special.ndtr(nc - crit * s) + special.ndtr(-nc - crit * s)))))


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``, computed as it
    computes it, from scipy.special, which imports in a third of the time of scipy.stats)."""
    from scipy import special
    return float(special.stdtrit(df, q))


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (``scipy.stats.t.sf``, from scipy.special)."""
    from scipy import special
    return float(special.stdtr(df, -t))


@functools.lru_cache(maxsize=None)
def _legendre(points: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on (-1, 1), the same for every df (computing them is the costly part)."""
    return np.polynomial.legendre.leggauss(points)


@functools.lru_cache(maxsize=None)
def _quantile_nodes(df: int, points: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes on the quantile scale u in (0, 1) and the values of S = sqrt(chi2_df / df)
    there: E[g(S)] = integral of g(S(u)) du, smooth for the bounded g above. S's quantile function is
    ``scipy.stats.chi.ppf(u, df) / sqrt(df)``, written as scipy.stats computes it."""
    from scipy import special
    x, w = _legendre(points)
    return np.sqrt(2 * special.gammaincinv(.5 * df, (x + 1.0) / 2.0)) / math.sqrt(df), w / 2.0


def min_detectable(sd: float, n: int, alpha: float, target: float = POWER) -> float | None:
    """The smallest ``|delta|`` found with probability ``target`` at ``n`` seeds; 0 when ``sd`` is 0
    (any nonzero constant difference is significant); None below 2 seeds."""
    if n < 2 or not math.isfinite(sd):
        return None
    if sd == 0.0:
        return 0.0
    from scipy import optimize
    hi = sd
    while power(hi, sd, n, alpha) < target:
        hi *= 2.0
    return float(optimize.brentq(lambda d: power(d, sd, n, alpha) - target, 0.0, hi, xtol=1e-12 * hi))


def seeds_needed(delta: float, sd: float, alpha: float, target: float = POWER,
                 max_seeds: int = MAX_SEEDS) -> int | None:
    """The fewest seeds (>= 2) at which a true mean ``delta`` with spread ``sd`` is found with probability
    ``target``; None when ``delta`` is 0 (no number of seeds) or more than ``max_seeds`` are needed."""
    if delta == 0.0 or not math.isfinite(delta) or not math.isfinite(sd):
        return None
    if sd == 0.0:
        return 2
    if power(delta, sd, max_seeds, alpha) < target:
        return None
    lo, hi = 2, max_seeds  # power rises with n: the first n that reaches the target, by bisection
    if power(delta, sd, lo, alpha) >= target:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(delta, sd, mid, alpha) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def power_by_simulation(delta: float, sd: float, n: int, alpha: float, trials: int = 20_000,
                        seed: int = 0) -> float:
    """Reference for :func:`power`: the fraction of simulated seed sets the paired t-test rejects."""
    from scipy import stats
    d = np.random.default_rng(seed).normal(delta, sd, size=(trials, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(t) > stats.t.ppf(1.0 - alpha / 2.0, n - 1)))
