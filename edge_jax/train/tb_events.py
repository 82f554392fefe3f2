"""TensorBoard scalars, written by the training loop itself into one event file.

An event file is a sequence of TFRecords (``length: u64 LE``, ``masked crc32c(length): u32``, the
serialized ``Event`` protobuf, ``masked crc32c(event): u32``). The loop writes only scalars, so the
few protobuf fields it needs are encoded here: ``Event{wall_time=1: double, step=2: int64,
file_version=3: string, summary=5: Summary{value=1: Value{tag=1: string, simple_value=2: float}},
session_log=7: SessionLog{status=1: START}}``. One record holds every scalar of a log step and is
written and flushed in the loop's thread: no writer thread competes with the loop for the GIL (the
event writer of tensorboardX, which this replaces, cost a dispatch-bound loop a fifth of its speed:
docs/benchmarks.md). tests/train/test_tb_events.py checks the bytes against tensorboardX's protobuf
classes, the reference.

A run resumed at step ``s`` starts a new file with a ``SessionLog START`` event at ``s`` (TensorBoard's
purge: events of earlier files at steps >= ``s`` are hidden, as those steps are trained again).
"""
from __future__ import annotations

import os
import socket
import struct
import time

from edge_jax.utils.append_log import AppendLog

FILE_VERSION = "brain.Event:2"
_START = 1  # SessionLog.SessionStatus.START


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecords."""
    c = 0xFFFFFFFF
    for byte in data:
        c = _TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 fields: a negative value in two's complement
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def event(step: int, wall_time: float, scalars: dict | None = None, file_version: str = "",
          session_start: bool = False) -> bytes:
    """A serialized ``Event`` (fields in number order, defaults left out, as protobuf writes them)."""
    out = b"\x09" + struct.pack("<d", wall_time)                  # 1: wall_time, fixed64
    if step:
        out += b"\x10" + _varint(int(step))                        # 2: step, varint
    if file_version:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))
                          for tag, value in scalars.items())       # Value: 1 tag, 2 simple_value (fixed32)
        out += _bytes_field(5, values)
    if session_start:
        out += _bytes_field(7, b"\x08" + _varint(_START))
    return out


class EventWriter:
    """Scalars into ``logdir/events.out.tfevents.<time>.<host>``; ``purge_step``: see the module doc."""

    def __init__(self, logdir: str, purge_step: int | None = None):
        now = time.time()
        self.path = os.path.join(logdir, f"events.out.tfevents.{int(now)}.{socket.gethostname()}")
        self._file = AppendLog(self.path)  # in a bucket: the whole file published again now and then
        self._write(event(purge_step or 0, now, file_version=FILE_VERSION))
        if purge_step is not None:
            self._write(event(purge_step, now, session_start=True))

    def scalars(self, step: int, values: dict) -> None:
        """One event holding ``{tag: value}`` at ``step``."""
        self._write(event(step, time.time(), {tag: float(v) for tag, v in values.items()}))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def _write(self, data: bytes) -> None:
        self._file.append(record(data))
