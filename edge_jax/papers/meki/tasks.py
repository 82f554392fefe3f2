"""``--tasks meki10`` (and ``eval.zero_shot=meki10``): the ten benchmarks MeKi reports, under the name
this repository's grids, docs and workdirs use; the same group as the generic ``ten_benchmarks``
(:mod:`edge_jax.eval.benchmarks`)."""
from edge_jax.eval.benchmarks import TEN_BENCHMARKS
from edge_jax.eval.tasks import GROUPS

GROUPS["meki10"] = TEN_BENCHMARKS
