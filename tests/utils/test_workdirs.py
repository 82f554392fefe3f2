"""edge_jax.utils.workdirs: unique report labels for workdirs."""
from edge_jax.utils.workdirs import workdir_labels


def test_workdir_labels_are_unique():
    assert workdir_labels(["a/run", "b/run", "c/x"]) == ["a/run", "b/run", "x"]
    assert workdir_labels(["a/run", "a/run"]) == ["a/run#1", "a/run#2"]
