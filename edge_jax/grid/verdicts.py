"""Is each ordering the paper claims borne out? Paired tests over seeds.

For every pair of cells the paper orders strictly (``better`` above ``worse``), the runs of one seed
share data order and initialisation, so their difference in our metric is taken seed by seed:
``d_s = m(better, s) - m(worse, s)``, negated for a lower-is-better metric, so ``d_s > 0`` means
ours agrees on seed ``s``. A two-sided paired t-test at :data:`ALPHA` on the ``d_s`` gives the verdict:

- ``agree``: significant and mean ``d`` > 0;
- ``disagree``: significant and mean ``d`` < 0;
- ``within noise``: not significant (with 3 seeds only a difference about 2.5 times its seed spread
  or more can be; a tie is within noise);
- ``n/a``: fewer than two seeds have both cells.

Each test also says what it could have seen (:mod:`edge_jax.grid.power`): ``min_detectable``, the
smallest true mean difference found with 80 % power at these seeds given the observed spread of the
differences, and, for a pair within noise, ``seeds_needed``, the seeds at which the observed mean
difference would be found with 80 % power (None: no difference, or more than ``power.MAX_SEEDS``).

Identical differences on every seed (no spread) are significant when they are not zero: the seed
then does not change the outcome (a deterministic simulation, say). Seeds where either value is
missing or NaN are left out of that pair. No correction for the number of pairs is made.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from edge_jax.grid import power

ALPHA = 0.05
VERDICTS = ("agree", "disagree", "within noise", "n/a")


@dataclasses.dataclass(frozen=True)
class PairTest:
    n: int
    mean: float | None       # mean paired difference, > 0: the paper's better cell is better in ours
    ci: tuple[float, float] | None   # (1 - ALPHA) t interval of the mean
    p: float | None          # two-sided paired t-test
    verdict: str
    sd: float | None = None             # standard deviation of the paired differences
    min_detectable: float | None = None  # smallest true mean difference found with 80 % power at n seeds
    seeds_needed: int | None = None     # within noise: seeds the observed mean would need for 80 % power

    @property
    def needs_text(self) -> str:
        """``seeds_needed`` for a table: a number, ``> 1000``, ``never`` (mean Δ 0: no number of seeds) or ``—``
        (not within noise)."""
        if self.verdict != "within noise":
            return "—"
        if self.seeds_needed is not None:
            return str(self.seeds_needed)
        return "never" if not self.mean else f"> {power.MAX_SEEDS}"


@dataclasses.dataclass(frozen=True)
class Pair:
    better: str              # the cell the paper ranks above
    worse: str
    test: PairTest
    reason: str = ""         # a person's one-line explanation of a disagreement (grid key ``explanations``)

    @property
    def name(self) -> str:
        return f"{self.better}>{self.worse}"


def paired_t(diffs: Sequence[float], alpha: float = ALPHA) -> PairTest:
    """The paired test on differences already signed so that > 0 agrees with the paper."""
    d = [float(x) for x in diffs if x is not None and math.isfinite(float(x))]
    n = len(d)
    if n < 2:
        return PairTest(n, d[0] if d else None, None, None, "n/a")
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    if sd == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
        ci = (mean, mean)
    else:
        se = sd / math.sqrt(n)
        t = mean / se
        p = 2.0 * power.t_sf(abs(t), n - 1)
        half = power.t_quantile(1.0 - alpha / 2.0, n - 1) * se
        ci = (mean - half, mean + half)
    if p < alpha:
        verdict = "agree" if mean > 0 else "disagree"
    else:
        verdict = "within noise"
    needed = power.seeds_needed(mean, sd, alpha) if verdict == "within noise" else None
    return PairTest(n, mean, ci, p, verdict, sd, power.min_detectable(sd, n, alpha), needed)


def claimed_pairs(paper_ranks: dict[str, int], cells: Sequence[str]) -> list[tuple[str, str]]:
    """(better, worse) for every pair of ``cells`` the paper ranks strictly, in paper order."""
    ranked = sorted((c for c in cells if c in paper_ranks), key=lambda c: (paper_ranks[c], list(cells).index(c)))
    return [(a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:] if paper_ranks[a] < paper_ranks[b]]


def judge(by_cell_seed: dict[str, dict[int, float]], paper_ranks: dict[str, int], lower_is_better: bool,
          explanations: dict[str, str] | None = None, alpha: float = ALPHA) -> list[Pair]:
    """Every claimed pair among the cells that have results, tested on the seeds both have."""
    sign = -1.0 if lower_is_better else 1.0
    cells = [c for c, seeds in by_cell_seed.items() if seeds]
    pairs = []
    for better, worse in claimed_pairs(paper_ranks, cells):
        a, b = by_cell_seed[better], by_cell_seed[worse]
        diffs = [sign * (a[s] - b[s]) for s in sorted(set(a) & set(b))
                 if math.isfinite(a[s]) and math.isfinite(b[s])]
        pair = Pair(better, worse, paired_t(diffs, alpha))
        reason = (explanations or {}).get(pair.name, "")
        pairs.append(dataclasses.replace(pair, reason=reason) if pair.test.verdict == "disagree" else pair)
    return pairs


def counts(pairs: Sequence[Pair]) -> dict[str, int]:
    """Pairs per verdict, every verdict present."""
    out = {v: 0 for v in VERDICTS}
    for p in pairs:
        out[p.test.verdict] += 1
    return out


def headline(pairs: Sequence[Pair], alpha: float = ALPHA) -> str:
    """"3 agree, 1 disagree, 2 within noise" (and "k n/a" when some pairs lack paired seeds)."""
    c = counts(pairs)
    text = f"{c['agree']} agree, {c['disagree']} disagree, {c['within noise']} within noise"
    return text + (f", {c['n/a']} n/a (fewer than 2 paired seeds)" if c["n/a"] else "")
