"""edge_jax.utils.append_log: a log appended in place on a disk, republished whole in a bucket."""
import pytest
from helpers import needs_extra

from edge_jax.utils.append_log import AppendLog


def test_a_local_log_starts_from_its_first_bytes_and_each_append_is_on_disk(tmp_path):
    path = tmp_path / "d" / "m.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"old line past the resumed step\n")
    log = AppendLog(str(path), b"kept\n")
    assert path.read_bytes() == b"kept\n"
    log.append(b"a\n")
    assert path.read_bytes() == b"kept\na\n"  # no flush needed
    log.close()


@needs_extra("gcsfs")
def test_a_bucket_log_is_published_whole_when_flushed_or_due(monkeypatch):
    from gcs import emulator

    from edge_jax.utils import append_log
    from edge_jax.utils.storage import epath
    with emulator() as bucket:
        where = f"{bucket}/logs/m.jsonl"
        now = [1000.0]
        monkeypatch.setattr(append_log.time, "monotonic", lambda: now[0])
        log = AppendLog(where, b"kept\n", every_s=30)
        assert epath(where).read_bytes() == b"kept\n"  # the start is published at once
        log.append(b"a\n")
        assert epath(where).read_bytes() == b"kept\n"  # not due: held in memory
        now[0] += 31
        log.append(b"b\n")
        assert epath(where).read_bytes() == b"kept\na\nb\n"  # due: everything so far, one object
        log.append(b"c\n")
        log.flush()
        assert epath(where).read_bytes() == b"kept\na\nb\nc\n"
        log.append(b"d\n")
        log.close()
        assert epath(where).read_bytes() == b"kept\na\nb\nc\nd\n"


def test_binary_appends_are_kept_byte_for_byte_and_a_closed_log_takes_no_more(tmp_path):
    log = AppendLog(str(tmp_path / "e.bin"))
    log.append(b"\x00\x01")
    log.close()
    assert (tmp_path / "e.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError):
        log.append(b"x")  # closed
