"""`edge-jax bench long-context` on a tiny model and short lengths: result structure, EdgeInfinite's
constant peak vs FullKV's growing one, the report's goal lines, the PNG / JSON outputs, and one-line
errors for bad sizes (no timing assertions beyond positivity)."""
import json

import pytest

from edge_jax.cli import main
from edge_jax.papers.edgeinfinite import bench as LC

TINY = dict(vocab_size=32, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32)
SIZES = dict(sink=16, window=16, segment=64)
CHUNK = 512
FLAGS = ["--d-model", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--d-ff", "32",
         "--vocab", "32", "--sink", "16", "--window", "16", "--segment", "64", "--chunk", str(CHUNK)]


@pytest.fixture(scope="module")
def result():
    cfg = LC.model_config(TINY, **SIZES)
    return cfg, LC.measure(cfg, (1024, 512), chunk=CHUNK, repeats=2, order="interleaved")


def test_measure_structure_and_memory_shape(result):
    _, r = result
    assert list(r) == [512, 1024]  # sorted
    for x in r.values():
        assert x["compressed"] is True
        for m in LC.METHODS:
            p = x[m]
            assert set(p) == {"ttft_s", "ttft_samples", "peak_bytes", "cache_bytes", "device_peak_bytes"}
            assert p["ttft_s"] > 0 and len(p["ttft_samples"]) == 2 and p["peak_bytes"] > 0
    ei = [r[n]["edgeinfinite"] for n in (512, 1024)]
    fk = [r[n]["fullkv"] for n in (512, 1024)]
    assert ei[0]["peak_bytes"] == ei[1]["peak_bytes"]  # constant in the input length
    assert ei[0]["cache_bytes"] == ei[1]["cache_bytes"]
    assert fk[1]["peak_bytes"] > fk[0]["peak_bytes"] > ei[0]["peak_bytes"]  # grows with the input
    assert fk[1]["cache_bytes"] > fk[0]["cache_bytes"]


def test_report_rows_and_goals(result):
    cfg, r = result
    lines = LC.format_report(cfg, r, CHUNK, 2, 1, "interleaved").splitlines()
    assert lines[0].startswith("long-context benchmark (EdgeInfinite §4.4, Fig. 3): d_model 32, 1 layers")
    head = next(i for i, line in enumerate(lines) if "EdgeInf TTFT s" in line)
    rows = [lines[head + 1].split(), lines[head + 2].split()]
    assert [row[0] for row in rows] == ["512", "1024"] and all(len(row) == 6 for row in rows)
    for row, n in zip(rows, (512, 1024)):
        e, f = r[n]["edgeinfinite"], r[n]["fullkv"]
        assert float(row[3]) == pytest.approx(e["ttft_s"] / f["ttft_s"], abs=1e-3)
        assert float(row[4]) == pytest.approx(e["peak_bytes"] / 2**20, abs=0.01)
    assert "goal 1: EdgeInfinite peak at 65536 <= 1.15 x its peak at 8192: not measured" in lines[-2]
    assert "goal 2: EdgeInfinite TTFT at 32768 <= 0.5 x FullKV's: not measured" in lines[-1]
    # the goals use the measured ratios when the lengths are there
    fake = {8192: {"edgeinfinite": {"peak_bytes": 100, "ttft_s": 1.0}, "fullkv": None},
            32768: {"edgeinfinite": {"peak_bytes": 110, "ttft_s": 1.0}, "fullkv": {"ttft_s": 1.5}},
            65536: {"edgeinfinite": {"peak_bytes": 110, "ttft_s": 2.0}, "fullkv": None}}
    g = LC.goals(fake)
    assert g[0]["status"] == "PASS" and g[0]["ratio"] == pytest.approx(1.1)
    assert g[1]["status"] == "FAIL" and g[1]["ratio"] == pytest.approx(1 / 1.5)
    fake[65536]["edgeinfinite"]["peak_bytes"] = 116
    fake[32768]["fullkv"] = None
    g = LC.goals(fake)
    assert g[0]["status"] == "FAIL" and g[1]["status"].startswith("not measured (FullKV skipped")


def test_device_peak_columns_and_short_rows():
    """Where the device keeps memory statistics (GPU) the running peak is two extra columns."""
    cfg = LC.model_config(TINY, **SIZES)
    def point(t, b, d):
        return dict(ttft_s=t, peak_bytes=b, device_peak_bytes=d)
    r = {64: {"compressed": False, "edgeinfinite": point(0.5, 2**20, 3 * 2**20),
              "fullkv": point(0.25, 2**19, 4 * 2**20)},
         128: {"compressed": True, "edgeinfinite": point(1.0, 2**20, 3 * 2**20), "fullkv": None}}
    lines = LC.format_report(cfg, r, CHUNK, 1, 1, "by-method").splitlines()
    assert any("process-wide running peak" in line for line in lines)
    head = next(i for i, line in enumerate(lines) if "EdgeInf TTFT s" in line)
    assert lines[head].split()[-6:] == ["EdgeInf", "dev", "MiB", "FullKV", "dev", "MiB"]
    assert lines[head + 1].split() == ["64*", "0.500", "0.250", "2.000", "1.00", "0.50", "3.0", "4.0"]
    assert lines[head + 2].split() == ["128", "1.000", "skipped", "skipped", "1.00", "skipped", "3.0", "skipped"]
    assert "* shorter than sink + window + segment = 96" in lines[head + 3]


def test_cli_writes_plot_and_json_and_skips_fullkv(tmp_path, capsys):
    png, js = tmp_path / "fig3.png", tmp_path / "out" / "fig3.json"
    assert main(["bench", "long-context", *FLAGS, "--lengths", "1024,64,512", "--max-fullkv-length", "512",
                 "--plot", str(png), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:1].isdigit()}
    assert set(rows) == {"64*", "512", "1024"}
    assert rows["1024"][2] == rows["1024"][3] == rows["1024"][5] == "skipped"
    assert "* shorter than sink + window + segment = 96" in out and "median of 1 timed" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(js.read_text())["result"]
    assert [p["length"] for p in data["points"]] == [64, 512, 1024]
    assert data["points"][2]["fullkv"] is None and data["points"][1]["fullkv"]["ttft_s"] > 0
    assert data["points"][0]["compressed"] is False and data["model"]["infini_segment"] == 64
    assert [g["name"] for g in data["goals"]] == ["peak", "ttft"] and data["repeats"] == 1
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "out").glob(".*.tmp"))


def test_bad_sizes_are_one_line_errors(capsys):
    with pytest.raises(ValueError, match=r"--window 80 is longer than --segment 64; use --window <= --segment"):
        LC.model_config(TINY, sink=16, window=80, segment=64)
    cfg = LC.model_config(TINY, **SIZES)
    with pytest.raises(ValueError, match="chunk, repeats and batch must be positive"):
        LC.measure(cfg, (512,), chunk=0)
    for extra, needle in ((["--window", "65"], "use --window <= --segment"), (["--lengths", "2k"], "--lengths"),
                          (["--kv-heads", "3"], "multiple of --kv-heads"),
                          (["--repeats", "0"], "argument --repeats: needs an integer >= 1"),
                          (["--preset", "tiny"], "--preset")):
        assert main(["bench", "long-context", *FLAGS, "--lengths", "512", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("edge-jax: error:") and needle in err and "\n" not in err
