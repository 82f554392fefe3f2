"""`edge-jax launch` and `summary` import no JAX, TFDS or torch: a fresh interpreter imports their modules,
launches a trivial command and summarizes a one-grid results tree, then lists the heavy modules it holds."""
import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("jax", "jaxlib", "flax", "tensorflow", "tensorflow_datasets", "torch")

GRID = """
def get_grid(preset):
    return {"name": "toy", "title": "Toy", "base": "fake.py:tiny", "base_overrides": {},
            "cells": {"a": {}, "b": {}}, "metric": "val_loss", "lower_is_better": True, "extra_metrics": [],
            "notes": "", "paper": {"metric": "loss", "values": {"a": 1.0, "b": 2.0}, "higher_is_better": False,
                                   "source": "T"}}
"""

SCRIPT = textwrap.dedent("""
    import argparse, io, sys
    from edge_jax.grid import summary
    from edge_jax.utils import launch
    assert launch.launch(2, 1, [sys.executable, "-c", "pass"], out=io.StringIO()) == 0
    root = sys.argv[1]
    assert summary.run(argparse.Namespace(ablations=root + "/ablations", results=root + "/results",
                                          preset="tiny")) == 0
    print("heavy:", *[m for m in {heavy} if m in sys.modules])
""").format(heavy=HEAVY)


@pytest.mark.subprocess
def test_launch_and_summary_import_no_jax(tmp_path):
    (tmp_path / "ablations").mkdir()
    (tmp_path / "ablations" / "toy.py").write_text(GRID)
    records = tmp_path / "results" / "toy" / "records"
    records.mkdir(parents=True)
    # a below b on two seeds, above on one: a within-noise pair, so the t-test and the power search both run
    for (cell, seed), v in {("a", 0): 1.0, ("a", 1): 1.1, ("a", 2): 1.3, ("b", 0): 1.2, ("b", 1): 1.2,
                            ("b", 2): 1.1}.items():
        rec = {"grid": "toy", "preset": "tiny", "cell": cell, "seed": seed, "metrics": {"val_loss": v},
               "git": {"commit": "0123456789abcdef", "dirty": False}}
        (records / f"{cell}__seed{seed}.json").write_text(json.dumps(rec))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    table, _, heavy = done.stdout.rstrip("\n").rpartition("\n")
    assert heavy == "heavy:", f"imported {heavy.partition(' ')[2]}"
    assert "| [toy](" in table and "| 0 | 0 | 1 |" in table   # the summary ran: one pair, within noise
    assert "edge-jax summary: grid 1/1: " in done.stderr      # progress goes to stderr
