"""Paths that may be local or in a bucket (``gs://``), as ``etils.epath`` paths."""
from __future__ import annotations

import os

from edge_jax.utils.extras import require


def epath(where: str):
    """``where`` as an ``etils.epath.Path``: a local path with ``~`` expanded, or a ``gs://`` one, which
    needs gcsfs (the ``gcs`` extra: a one-line refusal without it, not an ``ImportError`` at the first read)."""
    if "://" not in where:
        where = os.path.expanduser(where)
    elif where.startswith("gs://"):
        require("gcsfs", f"the gs:// path {where}")
    from etils import epath as _epath
    return _epath.Path(where)
