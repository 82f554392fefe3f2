"""Exclusive locks in a bucket, for hosts that share no file system (a Cloud TPU slice writing to ``gs://``).

A lock is an object. Taking it is creating the object with the precondition ``ifGenerationMatch=0``: the
service creates it for exactly one of several racing requests and answers the others 412. The object holds
the holder's note (pid, host, since, command, as a flock'd file does) and ``expires``, the end of its lease:
a thread of the holder writes the note again every quarter lease, each time on the condition that the
object is still the generation it wrote last. A holder that dies (SIGKILL, a lost host) stops renewing, and
once its lease has run out the next taker deletes that very generation (``ifGenerationMatch=<it>``, so two
takers cannot both remove a fresh lock) and creates its own. Letting go deletes the object, again only the
generation this holder wrote. A holder that finds its renewal refused (it stalled past its lease and was
taken over) stops renewing and says so once on stderr.

``EDGE_JAX_LOCK_LEASE_S`` sets the lease (default 120 s): a killed holder's lock is free that long after
the kill, and a holder must not stall longer than that.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from edge_jax.utils.storage import explained, remote_fs

LEASE_S = 120.0


def lease_s() -> float:
    return float(os.environ.get("EDGE_JAX_LOCK_LEASE_S", LEASE_S))


class ObjectLock:
    """The lock object ``where`` (``gs://bucket/...``); ``note``: what the holder tells a process that finds
    it busy."""

    def __init__(self, where: str, note: dict, lease: float | None = None):
        self.where, self.note = where, dict(note)
        self.lease = lease_s() if lease is None else lease
        self._fs, key = remote_fs(where)
        self._bucket, _, self._name = key.partition("/")
        self._generation: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def try_take(self) -> dict | None:
        """Take the lock: None when this process holds it now, else the holder's note ({} if unreadable)."""
        with explained(self.where):
            for _ in range(4):
                generation = self._write("0")
                if generation is not None:
                    self._generation = generation
                    self._renewer = threading.Thread(target=self._renew, name=f"lease {self.where}", daemon=True)
                    self._renewer.start()
                    return None
                found = self._read()
                if found is None:
                    continue  # let go of meanwhile: try again
                note, generation = found
                if float(note.get("expires", 0)) > time.time():
                    return note
                # the holder's lease ran out (it died): remove that generation only, then race for it
                try:
                    self._call("DELETE", ifGenerationMatch=generation)
                except (FileNotFoundError, FileExistsError):
                    pass  # another taker removed it, or its holder renewed just now
            found = self._read()
            return found[0] if found else {}

    def release(self) -> None:
        """Let go: stop renewing and delete the object, if it is still the one this holder wrote."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self._generation is not None:
            try:
                self._call("DELETE", ifGenerationMatch=self._generation)
            except (FileNotFoundError, FileExistsError):
                pass  # taken over after a stall: the new holder's object stays
            self._generation = None

    def _renew(self) -> None:
        while not self._stop.wait(self.lease / 4):
            try:
                generation = self._write(self._generation)
            except Exception as e:  # noqa: BLE001 - a failed renewal is retried at the next beat
                print(f"warning: could not renew the lock {self.where} ({type(e).__name__}); retrying",
                      file=sys.stderr, flush=True)
                continue
            if generation is None:
                print(f"warning: the lock {self.where} was taken over by another process (this one did not "
                      f"renew it within its {self.lease:.0f} s lease)", file=sys.stderr, flush=True)
                return
            self._generation = generation

    def _write(self, match: str) -> str | None:
        """Upload the note on the condition ``ifGenerationMatch=match``: its new generation, None when refused."""
        body = json.dumps({**self.note, "expires": time.time() + self.lease, "lease_s": self.lease}) + "\n"
        try:
            out = self._fs.call("POST", f"{self._fs._location}/upload/storage/v1/b/{{}}/o", self._bucket,
                                uploadType="media", name=self._name, ifGenerationMatch=match,
                                data=body.encode(), headers={"Content-Type": "text/plain"}, json_out=True)
        except FileExistsError:  # 412: the precondition did not hold
            return None
        return str(out["generation"])

    def _read(self) -> tuple[dict, str] | None:
        """``(note, generation)`` of the lock object, None when there is none."""
        try:
            meta = self._call("GET", json_out=True)
            _, body = self._call("GET", alt="media", generation=meta["generation"])
        except FileNotFoundError:
            return None
        try:
            note = json.loads(body.decode() or "{}")
        except ValueError:
            note = {}
        return (note if isinstance(note, dict) else {}), str(meta["generation"])

    def _call(self, method: str, **params):
        return self._fs.call(method, "b/{}/o/{}", self._bucket, self._name, **params)


def holder(where: str) -> dict:
    """The note of the lock object ``where`` ({} when it is absent or unreadable)."""
    found = ObjectLock(where, {})._read()
    return found[0] if found else {}
