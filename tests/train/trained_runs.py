"""A tiny training run made once per test process and shared by the checkpoint tests of tests/train: each
test reads it, or copies it (``shutil.copytree``) before it damages or resumes it."""
import os

import pytest
from conftest import tiny_overrides

_RUNS: dict[tuple, str] = {}


def tiny_run(tmp_path_factory, steps: int = 8) -> str:
    """The workdir of a tiny run of ``steps`` steps with checkpoints every 4 (steps 4 and 8 for the default),
    trained on the first call in this process and returned as it is after that. Never change it in place."""
    key = (str(tmp_path_factory.getbasetemp()), steps)
    if key not in _RUNS:
        from edge_jax.config import load_config
        from edge_jax.train.loop import train_and_evaluate
        root = tmp_path_factory.mktemp(f"tiny_run_{steps}")
        wd = str(root / "run")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("EDGE_JAX_DATA", os.environ.get("EDGE_JAX_TEST_DATA", str(root / "data")))
            train_and_evaluate(load_config("configs/lm.py:size=tiny", tiny_overrides(**{"train.steps": steps})), wd)
        _RUNS[key] = wd
    return _RUNS[key]
