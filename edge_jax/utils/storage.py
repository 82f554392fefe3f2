"""Paths that may be local or in a bucket (``gs://``), as ``etils.epath`` paths."""
from __future__ import annotations

import contextlib
import io
import os
from typing import IO, Iterator

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


@contextlib.contextmanager
def published(where: str, mode: str = "wb", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write the object ``where`` (``gs://...``) so that a reader sees all of it or none: the upload is
    committed as one object when the block ends and discarded if it raises. Object stores publish whole
    objects and have no rename, so this is the bucket's form of a temporary file renamed into place
    (:func:`edge_jax.utils.atomic.atomic_open`, which sends remote paths here). ``mode``: "w" or "wb"."""
    if mode not in ("w", "wb"):
        raise ValueError(f"published mode must be 'w' or 'wb', not {mode!r}")
    if where.startswith("gs://"):
        require("gcsfs", f"the gs:// path {where}")
    import fsspec
    fs, key = fsspec.core.url_to_fs(where)
    raw = fs.open(key, "wb", autocommit=False)  # uploads full blocks as they fill; publishes on commit()
    try:
        if mode == "w":
            text = io.TextIOWrapper(raw, encoding=encoding, write_through=True)
            yield text
            text.flush()
            text.detach()
        else:
            yield raw
        raw.close()
        raw.commit()
    except BaseException:
        # Cancel the upload; where the server refuses (a local emulator), the uncommitted upload is still
        # never visible and expires on its own, and the error that stopped the write is the one raised.
        with contextlib.suppress(Exception):
            raw.discard()
        raise
