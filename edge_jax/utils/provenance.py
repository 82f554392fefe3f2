"""Where a result came from: the git commit, the devices, the library versions.

Grid records (:mod:`edge_jax.grid.runner`) and routing traces keep these beside their numbers; each
function returns ``None`` fields (or an ``error`` entry) where it cannot tell, rather than raising.
"""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def git_info(where: str | Path) -> dict:
    """{"commit": sha or None, "dirty": bool or None}; None where git cannot tell."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=where, capture_output=True,
                              text=True, timeout=20)
    try:
        head = git("rev-parse", "HEAD")
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip() if head.returncode == 0 else None,
            "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def device_info() -> dict:
    """Platform, kind and count of the JAX devices, and the process count."""
    try:
        import jax
        devices = jax.devices()
        return {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
                "device_count": len(devices), "process_count": jax.process_count()}
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
