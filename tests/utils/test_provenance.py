"""edge_jax.utils.provenance: git commit and dirty flag, devices, versions of a record."""
import subprocess

import pytest

from edge_jax.utils.provenance import command_line, device_info, git_info, versions


def test_git_info(tmp_path):
    assert git_info(tmp_path) == {"commit": None, "dirty": None} or \
        git_info(tmp_path)["commit"] is None
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    try:
        subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git not available")
    (tmp_path / "f.txt").write_text("a")
    subprocess.run(git + ["add", "f.txt"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "x"], cwd=tmp_path, check=True)
    info = git_info(tmp_path)
    assert len(info["commit"]) == 40 and info["dirty"] is False
    (tmp_path / "f.txt").write_text("b")
    dirty = git_info(tmp_path)
    assert dirty["dirty"] is True and len(dirty["diff_sha256"]) == 64
    (tmp_path / "f.txt").write_text("c")
    assert git_info(tmp_path)["diff_sha256"] != dirty["diff_sha256"]


def test_command_line():
    assert command_line(["/venv/bin/edge-jax", "grid", "a b.py", "--seeds", "3"]) == \
        "edge-jax grid 'a b.py' --seeds 3"
    assert command_line(["/repo/edge_jax/cli.py", "grid", "x.py"]) == "edge-jax grid x.py"
    assert command_line(["/usr/bin/python", "-c", "pass"]) == "/usr/bin/python -c pass"


def test_device_info_and_versions():
    info = device_info()
    assert info["device_count"] >= 1 and info["platform"]
    v = versions()
    assert v["python"] and v["edge_jax"] and v["jax"]
