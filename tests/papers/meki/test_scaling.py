"""Log-linear memory-size fit and the grid post hook that writes it."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from edge_jax.errors import UserError
from edge_jax.papers.meki.scaling import log_linear_fit, memory_size, write_memory_fit


def test_fit_recovers_a_known_line():
    sizes = np.array([1e5, 2e5, 4e5, 8e5])
    fit = log_linear_fit(sizes, 3.0 - 0.25 * np.log(sizes))
    assert fit["a"] == pytest.approx(3.0) and fit["b"] == pytest.approx(-0.25) and fit["r2"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two or more"):
        log_linear_fit([5, 5], [1.0, 2.0])


def test_post_hook_writes_fit_and_plot(tmp_path):
    grid = SimpleNamespace(metric="val_loss", title="toy scaling")
    records = [{"cell": f"d{d}", "config": {"model": {"n_layers": 2, "vocab_size": 100, "d_mem": d}},
                "metrics": {"val_loss": 4.0 - 0.3 * math.log(200 * d) + 0.01 * s}}
               for d in (8, 16, 32) for s in range(2)]
    assert memory_size(records[0]) == 1600
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"model": {"vocab_size": 64}}')
    unresolved = {"cell": "d8", "seed": 0, "config": {"model": {"n_layers": 2, "vocab_size": 0, "d_mem": 8}}}
    assert memory_size({**unresolved, "workdir": str(tmp_path / "run")}) == 2 * 64 * 8   # from the run's config
    assert memory_size({**unresolved, "vocab_size": 32}) == 2 * 32 * 8                   # stored in the record
    with pytest.raises(UserError, match="vocabulary size unknown"):
        memory_size(unresolved)
    written = write_memory_fit(grid, records, tmp_path)
    text = (tmp_path / "fit.md").read_text()
    assert "- 0.3000 · ln(memory size)" in text and "Slope b < 0" in text
    assert all(p.stat().st_size > 0 for p in written)
