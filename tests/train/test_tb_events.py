"""The loop's own TensorBoard event writer against tensorboardX's protobuf classes (the reference)."""
import glob
import math
import struct
import zlib

import numpy as np
import pytest

from edge_jax.train import tb_events

event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboardX.proto.summary_pb2")


def read_records(path):
    """Every record of an event file, each CRC checked."""
    out, data = [], open(path, "rb").read()
    i = 0
    while i < len(data):
        length = data[i:i + 8]
        (n,) = struct.unpack("<Q", length)
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == tb_events.masked_crc(length)
        body = data[i + 12:i + 12 + n]
        assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == tb_events.masked_crc(body)
        out.append(event_pb2.Event.FromString(body))
        i += 16 + n
    return out


def test_crc32c_known_values():
    assert tb_events.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tb_events.crc32c(b"") == 0
    assert tb_events.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert tb_events.crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720 B.4: 32 bytes of ones
    assert zlib.crc32(b"123456789") != tb_events.crc32c(b"123456789")  # not the zlib polynomial


@pytest.mark.parametrize("seed", range(4))
def test_events_are_the_bytes_protobuf_writes(seed):
    rng = np.random.default_rng(seed)
    step = int(rng.integers(1, 10 ** 7))
    wall = float(rng.uniform(1e9, 2e9))
    scalars = {f"train/m{i}": float(np.float32(rng.normal() * 10.0 ** rng.integers(-6, 6))) for i in range(5)}
    want = event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in scalars.items()]))
    assert tb_events.event(step, wall, scalars) == want.SerializeToString()
    head = event_pb2.Event(wall_time=wall, step=step, file_version=tb_events.FILE_VERSION)
    assert tb_events.event(step, wall, file_version=tb_events.FILE_VERSION) == head.SerializeToString()
    start = event_pb2.Event(wall_time=wall, step=step, session_log=event_pb2.SessionLog(
        status=event_pb2.SessionLog.START))
    assert tb_events.event(step, wall, session_start=True) == start.SerializeToString()


def test_writer_file_reads_back(tmp_path):
    writer = tb_events.EventWriter(str(tmp_path), purge_step=7)
    writer.scalars(7, {"train/loss": 2.5, "train/lr": 1e-3})
    writer.scalars(8, {"eval/val_loss": 2.25})
    writer.close()
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    events = read_records(path)
    assert events[0].file_version == "brain.Event:2"
    assert events[1].session_log.status == event_pb2.SessionLog.START and events[1].step == 7
    got = {(e.step, v.tag): v.simple_value for e in events[2:] for v in e.summary.value}
    assert got == {(7, "train/loss"): 2.5, (7, "train/lr"): pytest.approx(1e-3), (8, "eval/val_loss"): 2.25}
    assert all(math.isfinite(e.wall_time) and e.wall_time > 1e9 for e in events)
