"""The task group ``meki10`` the MeKi paper registers is the generic ``ten_benchmarks``."""
from edge_jax.eval.tasks import expand


def test_meki10_is_the_ten_benchmarks():
    assert expand("meki10") == expand("ten_benchmarks") and len(expand("meki10")) == 10
