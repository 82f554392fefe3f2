"""edge_jax.utils.atomic: the target is the old file or the whole new one, never a part."""
import json
import os

import pytest

from edge_jax.utils import atomic


def _leftovers(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_text_and_json_round_trip(tmp_path):
    atomic.write_text_atomic(tmp_path / "sub" / "a.txt", "hello\n")
    assert (tmp_path / "sub" / "a.txt").read_text() == "hello\n"
    atomic.write_json_atomic(tmp_path / "b.json", {"x": 1, "p": tmp_path})
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1, "p": str(tmp_path)}
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "sub") == []


def test_permissions_follow_umask_not_mkstemp(tmp_path):
    atomic.write_text_atomic(tmp_path / "a.txt", "x")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_writer_raising_midway_leaves_no_file(tmp_path):
    target = tmp_path / "table.md"
    with pytest.raises(RuntimeError):
        with atomic.atomic_open(target) as f:
            f.write("half a tab")
            raise RuntimeError("killed")
    assert not target.exists()
    assert _leftovers(tmp_path) == []


def test_writer_raising_midway_keeps_old_content(tmp_path):
    target = tmp_path / "record.json"
    atomic.write_json_atomic(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic.atomic_open(target) as f:
            f.write('{"v": 2, "trunc')
            raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"v": 1}
    assert _leftovers(tmp_path) == []


def test_failed_rename_cleans_up(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError("disk gone")
    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic.write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_unserializable_json_touches_nothing(tmp_path):
    with pytest.raises(TypeError):
        atomic.write_json_atomic(tmp_path / "a.json", {"x": object()}, default=None)
    assert list(tmp_path.iterdir()) == []


def test_save_figure_atomic(tmp_path):
    from matplotlib.figure import Figure
    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    atomic.save_figure_atomic(fig, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_figure_failing_midway_leaves_no_file(tmp_path):
    class Broken:
        def savefig(self, f, **kw):
            f.write(b"\x89PNG partial")
            raise ValueError("renderer died")
    with pytest.raises(ValueError):
        atomic.save_figure_atomic(Broken(), tmp_path / "c.png")
    assert list(tmp_path.iterdir()) == []
