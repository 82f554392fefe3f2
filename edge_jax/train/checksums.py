"""Checksums that prove a checkpoint step is intact: one xxh3-128 digest per file, committed with the step.

orbax writes a step into ``<step>.orbax-checkpoint-tmp-*`` and renames it to ``<step>`` once every
file is written (:class:`ChecksummedRename` is the class that does that rename): just before the
rename, still in orbax's background commit thread, every file of the step is hashed and the digests go
into ``<step>/checksums.json``. So a step either has no final name yet or carries the digests of
exactly the bytes that were written, and :func:`verify` can later tell a step whose bytes changed on
disk (a flipped bit, a file overwritten by hand) from an intact one, which orbax alone cannot when the
changed bytes still parse.

Each process of a job hashes every N-th file (:func:`verify` splits the work by ``share``), so
verifying costs one read of the step spread over the hosts.
"""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import xxhash
from orbax.checkpoint._src.path import atomicity

from edge_jax.utils.storage import epath, files_under, is_remote, published

FILE = "checksums.json"
ALGORITHM = "xxh3_128"
CHUNK = 8 << 20
UNVERIFIED = "saved without checksums"
# orbax rewrites these while it commits the step (after the digests are taken): not hashed
NOT_HASHED = frozenset({FILE, "_CHECKPOINT_METADATA", "commit_success.txt"})


def digest(path) -> str:
    """The xxh3-128 hex digest of a file's bytes (local or in a bucket)."""
    h = xxhash.xxh3_128()
    with epath(str(path)).open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def digest_reference(path) -> str:
    """:func:`digest` of the whole file read at once (the naive form the chunked one is tested against)."""
    return xxhash.xxh3_128(epath(str(path)).read_bytes()).hexdigest()


def _covered(sizes: dict[str, int]) -> dict[str, int]:
    """The files of a step listing that the checksums cover (orbax's own commit files are not)."""
    return {rel: n for rel, n in sizes.items() if os.path.basename(rel) not in NOT_HASHED}


def step_files(step_dir) -> list[str]:
    """The step's files, as sorted paths relative to ``step_dir``, that the checksums cover."""
    return sorted(_covered(files_under(step_dir)))


def write(step_dir) -> None:
    """Hash every file of ``step_dir`` (a local directory or a bucket prefix) into ``step_dir/checksums.json``.
    The step is not yet visible under its final name (or, in a bucket, not yet committed), so a plain write
    is enough: fsynced before the rename, or one whole object."""
    step_dir = str(step_dir)
    files = {rel: [size, digest(os.path.join(step_dir, rel))]
             for rel, size in sorted(_covered(files_under(step_dir)).items())}
    text = json.dumps({"algorithm": ALGORITHM, "files": files})
    if is_remote(step_dir):
        with published(os.path.join(step_dir, FILE), "w") as f:
            f.write(text)
        return
    with open(os.path.join(step_dir, FILE), "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def verify(step_dir, share: tuple[int, int] = (0, 1)) -> str | None:
    """Why ``step_dir`` is not intact (a missing, resized or changed file, named), None when its files match
    their digests, or :data:`UNVERIFIED` for a step written without checksums (an older edge_jax).
    ``share=(i, n)``: check only every n-th listed file from the i-th (one process's part of a job)."""
    step_dir = str(step_dir)
    try:
        listed = json.loads(epath(os.path.join(step_dir, FILE)).read_text())
    except FileNotFoundError:
        return UNVERIFIED
    except (OSError, ValueError) as e:
        return f"its {FILE} is unreadable ({type(e).__name__})"
    why = malformed(listed)
    if why:
        return f"its {FILE} is malformed ({why})"
    listed, found = listed["files"], files_under(step_dir)
    i, n = share
    for rel in sorted(listed)[i::n]:
        size, want = listed[rel]
        if rel not in found:
            return f"{rel} is missing"
        if found[rel] != size:
            return f"{rel} has {found[rel]} bytes, {size} were written"
        if digest(os.path.join(step_dir, rel)) != want:
            return f"{rel} does not match its checksum"
    return None


def malformed(listed) -> str | None:
    """What is wrong with the structure of a parsed ``checksums.json`` (None when it has the form :func:`write`
    gives: ``{"algorithm": ALGORITHM, "files": {relative path: [size, hex digest]}}``)."""
    if not isinstance(listed, dict) or not isinstance(listed.get("files"), dict):
        return "no 'files' table"
    if listed.get("algorithm") != ALGORITHM:
        return f"algorithm {listed.get('algorithm')!r}, not {ALGORITHM!r}"
    for rel, entry in listed["files"].items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"entry {rel!r} is not a path inside the step"
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int and entry[0] >= 0
                and isinstance(entry[1], str)):
            return f"entry {rel!r} is not [size, digest]"
    return None


class ChecksummedRename(atomicity.AtomicRenameTemporaryPath):
    """orbax's atomic-rename commit with :func:`write` run on the finished files of a step just before its
    rename (orbax commits each item of a step, ``state`` and ``data``, the same way inside the step's
    temporary directory: those are covered by the step's checksums, not given their own)."""

    async def finalize(self, *args, **kwargs):
        if atomicity.TMP_DIR_SUFFIX not in Path(self.get()).parent.name:  # the step, not one of its items
            await asyncio.to_thread(write, Path(self.get()))
        return await super().finalize(*args, **kwargs)


class ChecksummedCommit(atomicity.CommitFileTemporaryPath):
    """The same in a bucket, which has no rename: orbax writes a step under its final name and commits it by
    writing ``commit_success.txt`` last (a step without one is not listed, and is removed on restart);
    :func:`write` runs just before that. A step's name is its number; its items' are not."""

    async def finalize(self, *args, **kwargs):
        if self.get().name.isdigit():
            await asyncio.to_thread(write, str(self.get()))
        return await super().finalize(*args, **kwargs)


def commit_class(directory: str):
    """The class orbax commits a step of ``directory`` with, its checksums written first: a rename on a disk,
    a commit file in a bucket."""
    return ChecksummedCommit if is_remote(directory) else ChecksummedRename
