"""A grid's post hook (``post`` of the ablation file), run after its tables: outputs never replaced by less.

A hook is called as ``function(grid, records, out)`` and returns the paths it wrote. A hook whose inputs are
not here (the cells' workdirs of a clean checkout, a file a run wrote beside its checkpoints) raises
:class:`PostCannotRun` before it writes anything: the files it wrote before stay as they are, and the grid
says so in one line (``plm_attention post: decode.md kept as it is: ...``) and goes on. So a rebuild
(``--tables-only``) in a checkout without the workdirs changes no committed output. With ``--out gs://...``
a hook writes into a local temporary directory, whose files are then uploaded to ``out`` (hooks need not
know buckets; one that keeps its outputs there keeps the bucket's as they are).

    from edge_jax.grid.post import PostCannotRun, absent_inputs
    missing = absent_inputs(records, "sparsity.json")
    if missing:
        raise PostCannotRun(f"... not here ({missing[0]}); run the grid to remeasure", [out / "sparsity.md"])
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from edge_jax.errors import UserError
from edge_jax.grid import spec
from edge_jax.utils import storage
from edge_jax.utils.atomic import copy_tree_atomic


class PostCannotRun(UserError):
    """A post hook's inputs are absent here; ``outputs``: the files it would write (kept as they are).
    A :class:`edge_jax.errors.UserError`, so that where no hook catches it it is still one line."""

    def __init__(self, reason: str, outputs: Iterable[str | os.PathLike] = ()):
        super().__init__(reason)
        self.reason = reason
        self.outputs = [Path(p) for p in outputs]


def absent_inputs(records: Iterable[dict], name: str = "") -> list[str]:
    """The inputs of ``records`` that are not on this machine: each record's workdir, or the file ``name``
    in it (``"sparsity.json"``), as paths; empty when all are here."""
    missing = []
    for rec in records:
        wd = rec.get("workdir") or ""
        if not wd:
            missing.append(f"(no workdir in the {rec.get('cell')} seed {rec.get('seed')} record)")
        elif not os.path.exists(os.path.join(wd, name) if name else wd):
            missing.append(os.path.join(wd, name) if name else wd)
    return missing


def run_post(grid, records: list[dict], out: str | Path, log: Callable[[str], None]) -> list[Path]:
    """Call the grid's post hook; a :class:`PostCannotRun` is logged in one line (its outputs kept, or none
    written) and the grid goes on. Returns the paths written."""
    hook = spec.hook(grid.post)
    if storage.is_remote(out):  # hooks write files: into a local directory, uploaded once they are done
        with tempfile.TemporaryDirectory(prefix="edge-jax-post-") as local:
            written = run_post(grid, records, Path(local), lambda line: log(line.replace(local, str(out))))
            copy_tree_atomic(local, out)
            return [storage.path(f"{out}/{os.path.relpath(path, local)}") for path in written]
    try:
        written = [Path(p) for p in hook(grid, records, out)]
    except PostCannotRun as e:
        log(f"{grid.name} post: {_kept(e.outputs)}: {e.reason}")
        return []
    log(f"{grid.post}: wrote {', '.join(str(p) for p in written)}")
    return written


def _kept(outputs: list[Path]) -> str:
    """``decode.md, decode.png kept as they are`` (those that exist), or what was not written."""
    here = [p.name for p in outputs if p.exists()]
    if here:
        return f"{', '.join(here)} kept as {'it is' if len(here) == 1 else 'they are'}" + (
            f" ({', '.join(p.name for p in outputs if not p.exists())} not written)" if len(here) < len(outputs)
            else "")
    if outputs:
        return f"{', '.join(p.name for p in outputs)} not written"
    return "not run, so what it wrote before stays as it is"
