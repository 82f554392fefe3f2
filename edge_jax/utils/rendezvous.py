"""The check-in every process of an explicitly configured job makes before JAX starts, and the link it
keeps to notice a process that is lost.

JAX's coordination service waits silently for missing processes (5 minutes by default) and then aborts
the process from C++ with a crash dump; two processes with one id, or a peer that dies, end the same way.
So before ``jax.distributed.initialize`` the processes meet on the coordinator's port with a protocol of
their own, one text line each way over TCP:

* process 0 listens on the port (all interfaces, as JAX's service does), takes one ``JOIN id n`` line
  from each other process, and answers ``GO`` once all N-1 are in; a second process with an id already
  seen, an id outside ``1..N-1`` or another N is answered with the error, which every process raises;
  at the timeout it names the ids that did not come and tells the ones that did;
* every other process connects (retrying while process 0 is not listening yet), sends its line and waits
  for the answer; one that never reaches process 0 names it;
* then process 0 closes the listener (JAX's service binds the same port) and each process keeps its
  connection: process 0 one per process, the others one to process 0. A connection that ends without a
  ``BYE`` (which :meth:`Link.bye` sends on every orderly exit) means that process is lost: the side that
  sees it reports the id (process 0 passes it on to the rest), without waiting for JAX's heartbeats.
"""
from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Callable

from edge_jax.errors import ConfigError, UserError

MAGIC = "EDGE-JAX/1"
RETRY_S = 0.25


class JoinError(UserError, RuntimeError):
    """The processes of a job did not all check in (one line: who is missing or what clashes, and the fix)."""


def split_address(address: str, shown: str | None = None) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` (``[v6]:port`` too); a missing or bad port is one line, which names
    the address as ``shown`` (default ``--coordinator-address ADDRESS``)."""
    shown = shown or f"--coordinator-address {address}"
    host, colon, port = address.rpartition(":")
    if not colon or not host or "]" in port:
        raise ConfigError(f"{shown} has no port; pass host:port, e.g. {address.strip() or 'localhost'}:12355")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{shown}: the port {port!r} is not a number in 1..65535; pass host:port, "
                          f"e.g. {host}:12355")
    return host.strip("[]"), int(port)


def _ids(ids) -> str:
    ids = sorted(ids)
    return f"process {ids[0]}" if len(ids) == 1 else f"processes {', '.join(map(str, ids))}"


def _send(conn: socket.socket, line: str) -> None:
    try:
        conn.sendall((line + "\n").encode())
    except OSError:
        pass


def _read_line(conn: socket.socket, deadline: float) -> str | None:
    """One line from ``conn`` by ``deadline`` (None: closed, not our protocol, or too late)."""
    data = b""
    while b"\n" not in data and len(data) < 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    line = data.split(b"\n", 1)[0].decode(errors="replace").strip()
    return line if line.startswith(MAGIC + " ") else None


class Link:
    """The connections a process keeps after the check-in: ``peers`` maps a process id to its socket."""

    def __init__(self, process_id: int, peers: dict[int, socket.socket]):
        self.process_id, self.peers = process_id, peers
        self._closed: set[int] = set()
        self._lock = threading.Lock()

    def bye(self) -> None:
        """Tell the others this process leaves in order (an exit that is not a loss)."""
        with self._lock:
            for conn in self.peers.values():
                _send(conn, f"{MAGIC} BYE")

    def watch(self, on_lost: Callable[[int], None]) -> threading.Thread:
        """Call ``on_lost(id)`` (from a daemon thread) when a process's connection ends without ``BYE``; on
        process 0 the id is passed on to the other processes first."""
        thread = threading.Thread(target=self._watch, args=(on_lost,), daemon=True, name="edge-jax-peers")
        thread.start()
        return thread

    def _watch(self, on_lost) -> None:
        buffers = {pid: b"" for pid in self.peers}
        while True:
            live = {conn: pid for pid, conn in self.peers.items() if pid not in self._closed}
            if not live:
                return
            readable, _, _ = select.select(list(live), [], [])
            for conn in readable:
                pid = live[conn]
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    self._closed.add(pid)
                    return self._lost(pid, on_lost)
                buffers[pid] += chunk
                *lines, buffers[pid] = buffers[pid].split(b"\n")
                for line in lines:
                    words = line.decode(errors="replace").split()
                    if words[1:2] == ["BYE"]:
                        self._closed.add(pid)
                    elif words[1:2] == ["LOST"] and len(words) > 2 and words[2].isdigit():
                        return on_lost(int(words[2]))

    def _lost(self, pid: int, on_lost) -> None:
        if self.process_id == 0:
            with self._lock:
                for other, conn in self.peers.items():
                    if other != pid and other not in self._closed:
                        _send(conn, f"{MAGIC} LOST {pid}")
        on_lost(pid)


def _listen(port: int) -> socket.socket:
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        return socket.create_server(("", port))
    except OSError as e:
        raise JoinError(f"process 0 cannot listen on port {port} ({os.strerror(e.errno) if e.errno else e}): "
                        "another process already has --process-id 0 on this host, or another program uses the port; "
                        "give each process its own id, or pick a free port in --coordinator-address") from None


def _coordinate(address: str, port: int, n: int, timeout_s: float) -> Link:
    server = _listen(port)
    deadline = time.monotonic() + timeout_s
    joined: dict[int, socket.socket] = {}
    failure = None
    try:
        while len(joined) < n - 1 and failure is None:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, n)) - set(joined))
                failure = (f"{_ids(missing)} of {n} did not join the job at {address} within {timeout_s:g} s: start "
                           f"{'it' if len(missing) == 1 else 'them'} (the same command with --process-id "
                           f"{', '.join(map(str, missing))}), or give more time with --join-timeout")
                break
            server.settimeout(min(left, 1.0))
            try:
                conn, _ = server.accept()
            except (socket.timeout, InterruptedError):
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            words = (_read_line(conn, time.monotonic() + 10) or "").split()
            if words[1:2] != ["JOIN"] or len(words) != 4 or not (words[2].isdigit() and words[3].isdigit()):
                conn.close()   # not one of ours (a port scanner, a stray client)
                continue
            pid, their_n = int(words[2]), int(words[3])
            if their_n != n:
                failure = (f"process {pid} was started with --num-processes {their_n} and process 0 with {n}; "
                           "start every process with the same number")
            elif pid == 0 or pid in joined:
                failure = (f"two processes were started with --process-id {pid}; give each process its own id "
                           f"0..{n - 1}")
            elif pid >= n:
                failure = f"process {pid} joined a job of {n} processes (ids 0..{n - 1}); check its --process-id"
            if failure is None:
                joined[pid] = conn
            else:
                _send(conn, f"{MAGIC} ERROR {failure}")
        for conn in joined.values():
            _send(conn, f"{MAGIC} ERROR {failure}" if failure else f"{MAGIC} GO")
    finally:
        server.close()
    if failure:
        for conn in joined.values():
            conn.close()
        raise JoinError(failure)
    return Link(0, joined)


def _join(address: str, host: str, port: int, n: int, i: int, timeout_s: float) -> Link:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=max(0.1, min(5.0, deadline - time.monotonic())))
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise JoinError(f"process 0 (the coordinator) did not answer at {address} within {timeout_s:g} s: "
                                "start it (the same command with --process-id 0) on that host, or check the "
                                "address and port; --join-timeout gives it more time") from None
            time.sleep(RETRY_S)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _send(conn, f"{MAGIC} JOIN {i} {n}")
    answer = _read_line(conn, deadline + timeout_s + 10)   # process 0 answers by its own deadline
    words = (answer or "").split(maxsplit=2)
    if words[1:2] == ["GO"]:
        conn.settimeout(None)
        return Link(i, {0: conn})
    conn.close()
    if words[1:2] == ["ERROR"] and len(words) > 2:
        raise JoinError(words[2])
    raise JoinError(f"the coordinator at {address} is not waiting for processes: its job already has every "
                    f"process id (is --process-id {i} given twice?) or another program uses the port; give "
                    "each process its own id, or pick a free port")


def check_in(address: str, n: int, i: int, timeout_s: float) -> Link:
    """Meet the other ``n - 1`` processes of the job at ``address`` within ``timeout_s`` seconds (module
    docstring); the :class:`Link` to keep, or :class:`JoinError` naming who is missing or what clashes."""
    host, port = split_address(address)
    if i == 0:
        return _coordinate(address, port, n, timeout_s)
    return _join(address, host, port, n, i, timeout_s)


def last_checkpoint(workdir: str | None) -> int | None:
    """The highest step directory under ``workdir/checkpoints`` (None: none, or no workdir)."""
    try:
        steps = [int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit()]
    except (OSError, TypeError):
        return None
    return max(steps) if steps else None
