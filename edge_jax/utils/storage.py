"""Paths that may be local or in a bucket (``gs://``), as ``etils.epath`` paths."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import pathlib
import re
from typing import IO, Iterator

from edge_jax.errors import UserError, one_line
from edge_jax.utils.extras import require


class StorageError(UserError, OSError):
    """A bucket path that cannot be used (no bucket, no credentials, no permission, no network): one line
    naming the path and what to do."""


def explain(e: BaseException, where: str) -> StorageError | None:
    """The one-line :class:`StorageError` for a failure of an object store request about ``where`` (None for
    an error that is not one: a bug keeps its traceback)."""
    bucket = str(where).split("://", 1)[-1].split("/", 1)[0]
    text = f"{type(e).__name__}: {e}"
    code = getattr(e, "code", None)
    if code == 401 or "UNAUTHENTICATED" in text:  # gcsfs's HttpError, TensorStore's status
        return StorageError(f"no valid credentials for {where}; run `gcloud auth application-default login`, or "
                            "set GOOGLE_APPLICATION_CREDENTIALS to a service account key (on a TPU VM: its "
                            "service account)")
    if code == 403 or text.startswith("OSError: Forbidden") or "PERMISSION_DENIED" in text:
        return StorageError(f"permission denied on {where}; give this account roles/storage.objectAdmin on "
                            f"gs://{bucket} (or write somewhere it may)")
    # a 404 on the bucket's object collection (a listing, an upload), not on one object: no bucket
    if isinstance(e, FileNotFoundError) and re.search(rf"\bb/{re.escape(bucket)}/o(\?|$)", str(e)):
        return StorageError(f"bucket gs://{bucket} of {where} does not exist (or this account cannot see "
                            f"it); create it (gcloud storage buckets create gs://{bucket}) or fix the path")
    if isinstance(e, (ConnectionError, TimeoutError)) or type(e).__module__.startswith("aiohttp") or (
            "UNAVAILABLE" in text or "DEADLINE_EXCEEDED" in text):
        return StorageError(f"cannot reach Cloud Storage for {where} ({one_line(e)}); check the network and "
                            "rerun the same command (a run resumes from its last committed checkpoint)")
    return None


@contextlib.contextmanager
def explained(where: str) -> Iterator[None]:
    """Object store failures inside the block raised as their one-line :class:`StorageError`."""
    try:
        yield
    except StorageError:
        raise
    except Exception as e:
        why = explain(e, where) if is_remote(where) else None
        if why is None:
            raise
        raise why from e


def ensure_usable(where: str) -> None:
    """Fail now, in one line, when ``where`` is in a bucket that is missing or that this process may not list
    (a run would otherwise fail at its first write, or its first checkpoint); nothing is written. A local
    path passes."""
    if not is_remote(where):
        return
    with explained(where):
        fs, key = remote_fs(where)
        bucket, _, prefix = key.partition("/")
        fs.call("GET", "b/{}/o", bucket, prefix=prefix, maxResults=1, json_out=True)


def epath(where: str):
    """``where`` as an ``etils.epath.Path``: a local path with ``~`` expanded, or a ``gs://`` one, which
    needs gcsfs (the ``gcs`` extra: a one-line refusal without it, not an ``ImportError`` at the first read)."""
    if "://" not in where:
        where = os.path.expanduser(where)
    elif where.startswith("gs://"):
        require("gcsfs", f"the gs:// path {where}")
        configure_gcsfs()
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
    fs, key = remote_fs(where)
    with explained(where):
        raw = fs.open(key, "wb", autocommit=False)  # uploads full blocks as they fill; publishes on commit()
    try:
        if mode == "w":
            text = io.TextIOWrapper(raw, encoding=encoding, write_through=True)
            yield text
            text.flush()
            text.detach()
        else:
            yield raw
        with explained(where):
            raw.close()
            raw.commit()
    except BaseException:
        # Cancel the upload; where the server refuses (a local emulator), the uncommitted upload is still
        # never visible and expires on its own, and the error that stopped the write is the one raised.
        with contextlib.suppress(Exception):
            raw.discard()
        raw.closed = True  # nothing left to send: not closed again (an upload) when it is collected
        raise


def is_remote(where) -> bool:
    """Whether ``where`` names an object store path (``gs://...``) rather than a local one."""
    return "://" in str(where)


def remote_fs(where: str):
    """``(filesystem, key)`` of a remote path (``bucket/object``), its listings never cached
    (:func:`configure_gcsfs`)."""
    if where.startswith("gs://"):
        require("gcsfs", f"the gs:// path {where}")
    configure_gcsfs()
    import fsspec
    return fsspec.core.url_to_fs(where)


def configure_gcsfs() -> None:
    """gcsfs as a job of several processes needs it. Listings: gcsfs keeps each directory listing it makes,
    by default for good, and answers later questions (does this object exist?) from it: an object another
    process wrote after this one listed its prefix (a record, a checkpoint step, a shard of another host)
    would stay invisible. Here every instance is made without that cache (fsspec's configuration, applied to
    each new instance: orbax's, through etils.epath, included); the instances made before are dropped once.
    Logs: its traceback of a request it gives up on is dropped (:class:`_RaisedAnyway`)."""
    import fsspec.config
    options = fsspec.config.conf.setdefault("gs", {})
    if options.get("use_listings_cache") is not False:
        options["use_listings_cache"] = False
        import gcsfs
        gcsfs.GCSFileSystem.clear_instance_cache()
    gcsfs_log = logging.getLogger("gcsfs")
    if not any(isinstance(f, _RaisedAnyway) for f in gcsfs_log.filters):
        gcsfs_log.addFilter(_RaisedAnyway())


class _RaisedAnyway(logging.Filter):
    """Drops gcsfs's traceback of a request it gives up on (out of retries, or not retried: a 401, a 403): the
    same exception is raised to the caller, which says it in one line (:func:`explain`) or shows it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (" out of retries on exception: " in message or " non-retriable exception: " in message)


def files_under(directory) -> dict[str, int]:
    """``{path relative to directory: size in bytes}`` of every file below ``directory`` ({} when absent); a
    bucket answers it with one listing."""
    directory = str(directory)
    if not is_remote(directory):
        out = {}
        for root, _, names in os.walk(directory):
            for name in names:
                full = os.path.join(root, name)
                out[os.path.relpath(full, directory)] = os.path.getsize(full)
        return out
    fs, key = remote_fs(directory)
    key = key.rstrip("/")
    found = fs.find(key, detail=True)
    return {name[len(key) + 1:]: int(info["size"]) for name, info in found.items()
            if info.get("type") == "file" and name.startswith(key + "/")}


def move(source, target) -> None:
    """Move the file or directory ``source`` to ``target`` (absent; its parent is made). A bucket has no
    rename of a prefix: its objects are copied, then the sources deleted."""
    source, target = str(source), str(target)
    if not is_remote(source):
        import shutil
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(source, target)
        return
    fs, key = remote_fs(source)
    fs.copy(key, fs._strip_protocol(target), recursive=True)
    fs.rm(key, recursive=True)


def path(where):
    """``where`` as a path with pathlib's methods (``/``, exists, glob, iterdir, read_text, mkdir, unlink): a
    ``pathlib.Path`` on disk, an ``etils.epath.Path`` in a bucket (``pathlib.Path`` would fold its ``gs://``
    into a relative ``gs:/`` directory)."""
    if is_remote(where):
        return where if hasattr(where, "_path_str") else epath(str(where))
    return pathlib.Path(where)


def absolute(where):
    """:func:`path` made absolute (a bucket's path already is)."""
    found = path(where)
    return found if is_remote(found) else found.resolve()
