"""PLM's sparsity report (edge_jax.papers.plm.sparsity_report) from given sweeps: the table's means over seeds, the
Fig. 11 curve in the markdown and the CSV against means computed here, the plot, the grid post hook's grouping
(grid order, then seed) and its errors, run_sparsity's labels, and Table 14 as the paper prints it. The sweep of
a trained checkpoint end to end (`edge-jax analyze sparsity`): test_sparsity.py."""
import csv
import io
import json
import re

import numpy as np
import pytest

from edge_jax.grid.post import PostCannotRun
from edge_jax.papers.plm import sparsity_report as sr

RATIOS = [0.0, 0.25, 0.5, 0.75, 0.9]


def _sweep(rng):
    """One run's sparsity.json: a rising perplexity curve and Table 14's counts, random."""
    total = int(rng.integers(10**5, 10**6))
    masked = float(rng.uniform(0, 0.5) * total)
    return {"base_ppl": float(rng.uniform(5, 50)), "ratios": RATIOS,
            "ppl_increase": np.sort(rng.uniform(0, 3, len(RATIOS))).tolist(), "max_ppl_increase": 1.0,
            "max_rel_increase": 0.01, "sparsity_rate": float(rng.uniform(0, 1)),
            "sparsity_rate_abs": float(rng.uniform(0, 1)), "zero_fraction": float(rng.uniform(0, 0.5)),
            "total_params": total, "masked_params": masked, "executed_params": total - masked,
            "executed_fraction": (total - masked) / total}


def _rows(text, labels):
    return {line.split("|")[1].strip(): [v.strip() for v in line.split("|")[2:-1]]
            for line in text.splitlines() if any(line.startswith(f"| {lab} |") for lab in labels)}


def _mean(values):
    return sum(values) / len(values)


def test_table14_is_the_papers():
    """PLM Table 14, copied from the paper by hand (raw size, activation sparsity rate, masked, executed,
    executed fraction)."""
    assert sr.PAPER_TABLE14 == {"PLM-1.8B-Base (ReLU²)": (1.83, 0.9090, 0.4832, 1.3968, 0.7430),
                                "Qwen2.5-1.5B (SwiGLU)": (1.54, 0.0400, 0.0308, 1.5092, 0.9800),
                                "Yulan-Mini-2.4B (SwiGLU)": (2.42, 0.0900, 0.0929, 2.3271, 0.9616),
                                "SmolLM2-1.7B (SwiGLU)": (1.71, 0.0010, 0.0008, 1.7092, 0.9995)}


def test_the_report_averages_seeds(tmp_path):
    rng = np.random.default_rng(0)
    groups = {"relu2": [_sweep(rng), _sweep(rng)], "swiglu": [_sweep(rng)]}
    paths = sr.write_report(groups, tmp_path, "Sparsity test")
    assert paths == [tmp_path / f"sparsity.{k}" for k in ("md", "csv", "png")]
    text = paths[0].read_text()
    assert text.startswith("# Sparsity test") and "Means over 1/2 seed(s) per row." in text
    rows = _rows(text, groups)
    for label, rs in groups.items():
        m = {k: _mean([r[k] for r in rs]) for k in rs[0] if k not in ("ratios", "ppl_increase")}
        assert rows[label] == [str(len(rs)), f"{m['base_ppl']:.3f}", f"{m['sparsity_rate']:.4f}",
                               f"{m['sparsity_rate_abs']:.4f}", f"{m['zero_fraction']:.4f}",
                               f"{rs[0]['total_params']:,}", f"{m['masked_params']:,.0f}",
                               f"{m['executed_params']:,.0f}", f"{m['executed_fraction']:.4f}"]
    curve = {label: [_mean([r["ppl_increase"][i] for r in rs]) for i in range(len(RATIOS))]
             for label, rs in groups.items()}
    for i, r in enumerate(RATIOS):
        assert f"| {r:.2f} | {curve['relu2'][i]:.4g} | {curve['swiglu'][i]:.4g} |" in text
    assert "| PLM-1.8B-Base (ReLU²) | 1.83 | 0.9090 | 0.4832 | 1.3968 | 0.7430 |" in text
    table = list(csv.reader(io.StringIO(paths[1].read_text())))
    assert table[0] == ["r", "relu2", "swiglu"] and [float(row[0]) for row in table[1:]] == RATIOS
    for row, i in zip(table[1:], range(len(RATIOS))):
        assert [float(v) for v in row[1:]] == pytest.approx([curve["relu2"][i], curve["swiglu"][i]], rel=1e-12)
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class Grid:
    name, title, cells = "plm_act", "Activation", ("relu2", "swiglu", "gelu")


def _run_dirs(tmp_path, rng, layout):
    """Records of the cells and seeds in ``layout`` (shuffled), each workdir with its sparsity.json."""
    records, sweeps = [], {}
    for cell, seed in layout:
        wd = tmp_path / f"{cell}_{seed}"
        wd.mkdir()
        sweeps[cell, seed] = _sweep(rng)
        (wd / "sparsity.json").write_text(json.dumps(sweeps[cell, seed]))
        records.append({"cell": cell, "seed": seed, "workdir": str(wd)})
    order = rng.permutation(len(records))
    return [records[i] for i in order], sweeps


def test_the_post_hook_groups_runs_by_cell_in_grid_order(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    records, sweeps = _run_dirs(tmp_path, rng, [("swiglu", 1), ("relu2", 0), ("swiglu", 0), ("relu2", 2)])
    seen = []
    monkeypatch.setattr(sr, "write_report", lambda groups, out, title: seen.append((groups, out, title)) or ["ok"])
    assert sr.write_sparsity_curves(Grid(), records, tmp_path) == ["ok"]
    groups, out, title = seen[0]
    assert (out, title, list(groups)) == (tmp_path, "Activation", ["relu2", "swiglu"])
    assert groups == {"relu2": [sweeps["relu2", 0], sweeps["relu2", 2]],
                      "swiglu": [sweeps["swiglu", 0], sweeps["swiglu", 1]]}


def test_the_post_hook_without_its_inputs_keeps_the_report(tmp_path):
    rng = np.random.default_rng(2)
    records, _ = _run_dirs(tmp_path, rng, [("relu2", 0), ("swiglu", 0)])
    gone = tmp_path / "swiglu_0" / "sparsity.json"
    gone.unlink()
    with pytest.raises(PostCannotRun, match=re.escape(f"1 of the 2 runs' sparsity.json are not here ({gone})")) as e:
        sr.write_sparsity_curves(Grid(), records, tmp_path / "out")
    assert e.value.outputs == [tmp_path / "out" / n for n in ("sparsity.md", "sparsity.csv", "sparsity.png")]
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="no sparsity.json in the workdirs of plm_act; train with "
                                                "train.sparsity_batches > 0"):
        sr.write_sparsity_curves(Grid(), [], tmp_path / "out")


def test_run_sparsity_labels_and_arguments(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    workdirs = [str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"), str(tmp_path / "c")]
    swept, written = [], []

    def fake_sweep(workdir, *args):
        swept.append((workdir, args))
        return _sweep(rng)

    monkeypatch.setattr(sr, "sweep_workdir", fake_sweep)
    monkeypatch.setattr(sr, "write_report", lambda groups, out, title: written.append((groups, out, title)) or [])
    got = sr.run_sparsity(workdirs, str(tmp_path / "out"), num_batches=3, ratios=(0.0, 0.5), max_ppl_increase=2.0,
                          max_rel_increase=0.05)
    assert got["labels"] == ["a/run", "b/run", "c"]  # a repeated base name gets its parent
    assert swept == [(w, (3, (0.0, 0.5), 2.0, 0.05)) for w in workdirs]
    groups, out, title = written[0]
    assert groups == {lab: [r] for lab, r in zip(got["labels"], got["results"])}
    assert (out, title) == (str(tmp_path / "out"), "Activation sparsity (PLM §7.2)")
    for labels in (["x", "y"], ["x", "x", "y"]):
        with pytest.raises(ValueError, match=re.escape(f"need one distinct --label per --workdir, got {labels}")):
            sr.run_sparsity(workdirs, str(tmp_path / "out"), labels=labels)
    assert len(swept) == 3  # a bad label sweeps nothing


def test_sweep_workdir_needs_batches(tmp_path):
    for n in (0, -1):
        with pytest.raises(ValueError, match=re.escape(f"--batches={n} must be positive")):
            sr.sweep_workdir(str(tmp_path), num_batches=n)
