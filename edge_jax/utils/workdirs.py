"""Workdirs compared in one report: the flags that name them, and their labels."""
from __future__ import annotations

import os
from pathlib import Path


def add_workdir_arguments(parser) -> None:
    """``--workdir`` (repeatable, at least one) and ``--label`` (one per workdir, or none)."""
    parser.add_argument("--workdir", action="append", required=True, help="trained workdir (repeatable)")
    parser.add_argument("--label", action="append", default=[], help="one per --workdir (default: base names)")


def workdir_labels(workdirs: list[str]) -> list[str]:
    """Workdir base names; a repeated name gets its parent directory, then ``#k``, until unique."""
    paths = [Path(os.path.abspath(w)) for w in workdirs]
    names = [p.name or str(p) for p in paths]
    labels = [f"{p.parent.name}/{n}" if names.count(n) > 1 else n for p, n in zip(paths, names)]
    out, seen = [], {}
    for lab in labels:
        if labels.count(lab) > 1:
            seen[lab] = seen.get(lab, 0) + 1
            lab = f"{lab}#{seen[lab]}"
        out.append(lab)
    return out
