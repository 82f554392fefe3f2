"""``edge-jax bench checkpoint`` prints the checksum and async-save ratios, each from measured rounds."""
import re

from conftest import tiny_overrides

from edge_jax.cli import main


def test_bench_checkpoint_prints_three_ratios(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_JAX_DATA", str(tmp_path / "data"))
    flags = [f"--config.{k}={v}" for k, v in tiny_overrides().items()]
    assert main(["bench", "checkpoint", "--repeats", "2", "--steps", "4", "--every", "2", "--dir", str(tmp_path),
                 *flags]) == 0
    out = capsys.readouterr().out
    ratios = re.findall(r"ratio (.+) / (.+) = (\d+\.\d+) \(goal <= ([\d.]+): (met|NOT met)\)", out)
    assert [(a, b, goal) for a, b, _, goal, _ in ratios] == [
        ("with checksums", "plain orbax", "1.1"), ("verify + restore", "restore", "1.1"),
        ("async every 2", "no checkpoint", "1.05")]
    assert all(float(r[2]) > 0 for r in ratios)
    assert "synchronous saves instead: median" in out
    assert list(tmp_path.glob("edge_jax-bench-ckpt-*")) == []          # its checkpoints are removed
