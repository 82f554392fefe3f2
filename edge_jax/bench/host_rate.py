"""The token rate a host of a multi-host slice must feed, from the committed paper-preset compile tables
(``edge-jax bench data`` holds its readers to it)."""
from __future__ import annotations

import glob
import json
import math
import os
import pathlib

CHIPS_PER_HOST = 4    # TPU VMs of a multi-host slice hold 4 chips (edge_jax.compile.chips: chips_per_host_bounds 2x2x1)
# Used only when no results/*/paper_compile.json is found: results/meki_main/paper_compile.json, v5p-128
# (16 hosts), run "baseline": 1,441,818 est. tokens/s, i.e. 90,114 per host (MeKi itself: 1,303,478 -> 81,467),
# with loop bodies counted every time (issue 35; the tables before counted 4,595,094, an overestimate).
FALLBACK_HOST_RATE = (90_114.0, "constant from results/meki_main/paper_compile.json (v5p-128 baseline / 16 hosts)")


def paper_host_rate(root: str | None = None) -> tuple[float, str]:
    """The highest per-host token rate in the committed paper-preset compile tables (est. tokens/s over the
    slice's hosts), and the cell it comes from; :data:`FALLBACK_HOST_RATE` if there are none."""
    from edge_jax.compile.chips import slice_shape
    root = root or str(pathlib.Path(__file__).resolve().parents[2])   # the repository
    best, where = 0.0, ""
    for path in sorted(glob.glob(os.path.join(root, "results", "*", "paper_compile.json"))):
        with open(path) as f:
            tables = json.load(f)
        for topology, tab in tables.items():
            try:
                chips = math.prod(int(x) for x in slice_shape(topology.split()[0])[1].split("x"))
            except Exception:  # noqa: BLE001 - a topology the chip table does not know: skip it
                continue
            hosts = max(1, chips // CHIPS_PER_HOST)
            for cell, row in tab.get("rows", {}).items():
                rate = float(str(row.get("est. tokens/s", "0")).replace(",", "") or 0)
                if rate / hosts > best:
                    best, where = rate / hosts, (f"{os.path.relpath(path, root)}: {topology} {cell}, {rate:,.0f} "
                                                 f"tok/s over {hosts} hosts")
    return (best, where) if best else FALLBACK_HOST_RATE
