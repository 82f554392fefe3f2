"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

Each writer fills a temporary file in the target's own directory (so the final
rename never crosses a filesystem), flushes and fsyncs it, then `os.replace`s it
onto the target and fsyncs the directory. If anything raises before the rename,
the temporary file is removed and the target is left untouched.

    write_text_atomic("results/x/table.md", text)
    write_json_atomic("results/x/records/a__seed0.json", record)
    save_figure_atomic(fig, "results/x/curves.png")

In a job of several processes only process 0 writes (:func:`edge_jax.distributed.is_lead`): the
others fill a buffer that is dropped, so a shared directory (NFS, a bucket mount) gets each file
once. Inside :func:`edge_jax.distributed.solo` a process writes its own (a host-local copy).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from edge_jax.distributed import is_lead
from edge_jax.utils.storage import published

__all__ = [
    "atomic_dir",
    "atomic_open",
    "copy_tree_atomic",
    "write_bytes_atomic",
    "write_text_atomic",
    "write_json_atomic",
    "save_figure_atomic",
]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable; best effort (some filesystems refuse)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w",
                encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file that replaces `path` only if the block finishes.

    `mode` is "w" (text) or "wb" (bytes). Parent directories are created. On a process other than
    the job's first the block writes into a buffer that is dropped. A ``gs://`` path is written as one
    object that appears when the block ends (:func:`edge_jax.utils.storage.published`).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    if not is_lead():  # another process of the job writes it
        yield io.StringIO() if mode == "w" else io.BytesIO()
        return
    if "://" in str(path):  # a bucket: one object, committed at the end (no rename there)
        with published(str(path), mode, encoding) as f:
            yield f
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        kwargs = {"encoding": encoding} if mode == "w" else {}
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file 0600; give it the permissions open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(target.parent)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, tag: str = "writing") -> Iterator[Path]:
    """A whole directory written at once: the caller fills the temporary directory yielded (beside
    ``path``, hidden), which is renamed to ``path`` (absent or empty) when the block ends, and removed
    if it raises, so ``path`` never holds a part. Every process writes its own (the caller decides who)."""
    import shutil

    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{tag}-", dir=target.parent))
    try:
        yield tmp
        if target.is_dir():
            target.rmdir()  # empty: a non-empty one makes this raise, and nothing is lost
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(target.parent)


def copy_tree_atomic(source: str | os.PathLike, target: str | os.PathLike, last: tuple[str, ...] = ()) -> list[str]:
    """Copy every file below the local directory ``source`` to ``target`` (a directory or a bucket prefix),
    each one written atomically, the files named in ``last`` after all the others (a manifest, a config that
    readers look for first). Returns the copied paths, relative to ``source``."""
    from edge_jax.utils.storage import files_under
    names = sorted(files_under(source), key=lambda rel: rel in last)
    for rel in names:
        with open(os.path.join(source, rel), "rb") as f:
            write_bytes_atomic(f"{str(target).rstrip('/')}/{rel}", f.read())
    return names


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json_atomic(path: str | os.PathLike, obj: Any, *, indent: int | None = 2,
                      default=str) -> None:
    """Serialize first (so a serialization error touches no file), then write.

    `default=str` turns anything json cannot encode (paths, dtypes, ...) into its
    string form; pass `default=None` to make such values an error instead.
    """
    text = json.dumps(obj, indent=indent, default=default)
    write_text_atomic(path, text + "\n")


def save_figure_atomic(fig, path: str | os.PathLike, **savefig_kwargs) -> None:
    """`fig.savefig` into a temporary file, then rename onto `path`.

    The image format comes from the file suffix unless `format=` is given.
    """
    fmt = savefig_kwargs.pop("format", None) or Path(path).suffix.lstrip(".") or "png"
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=fmt, **savefig_kwargs)
