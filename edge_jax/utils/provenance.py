"""Where a result came from: the git commit, the devices, the library versions.

Grid records (:mod:`edge_jax.grid.runner`) and routing traces keep these beside their numbers; each
function returns ``None`` fields (or an ``error`` entry) where it cannot tell, rather than raising.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path


def git_info(where: str | Path) -> dict:
    """{"commit": sha or None, "dirty": bool or None}, and for a dirty tree "diff_sha256": the sha256 of
    ``git diff HEAD`` (tracked files; untracked ones do not count), so two dirty runs can at least be told
    apart. None where git cannot tell (not a repository, no git)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=where, capture_output=True, timeout=60)
    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no")
        info = {"commit": head.stdout.decode().strip() if head.returncode == 0 else None,
                "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}
        if info["dirty"]:
            diff = git("diff", "HEAD", "--binary")
            info["diff_sha256"] = hashlib.sha256(diff.stdout).hexdigest() if diff.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return info


def command_line(argv: list[str] | None = None) -> str:
    """The command this process runs, as a shell line: ``edge-jax ...`` for the edge-jax entry point or
    ``python -m edge_jax.cli``, else the interpreter's argv as given."""
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0]) if argv else ""
    if prog == "edge-jax" or argv[:1] and argv[0].endswith(os.path.join("edge_jax", "cli.py")):
        return shlex.join(["edge-jax", *argv[1:]])
    return shlex.join(argv)


def device_info() -> dict:
    """Platform, kind and count of the JAX devices, and the process count with the devices of each."""
    try:
        import jax
        devices = jax.devices()
        return {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
                "device_count": len(devices), "process_count": jax.process_count(),
                "local_device_count": jax.local_device_count()}
    except Exception as e:  # noqa: BLE001 - a record without device info beats none
        lines = str(e).strip().splitlines()
        return {"error": f"{type(e).__name__}: {lines[0] if lines else '(no message)'}"}


def versions() -> dict:
    """Python, edge_jax, jax and jaxlib versions (None for a library that is not installed)."""
    import edge_jax
    info = {"python": platform.python_version(), "edge_jax": edge_jax.__version__}
    try:
        import jax
        import jaxlib
        info.update(jax=jax.__version__, jaxlib=jaxlib.__version__)
    except ImportError:
        info.update(jax=None, jaxlib=None)
    return info
