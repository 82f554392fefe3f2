"""`edge-jax bench mla-decode` on a tiny shape: the table's rows and ratios (no timing assertions)."""
import jax.numpy as jnp

from edge_jax.cli import main
from edge_jax.infer.decode import cache_index
from edge_jax.models.decoder import DecoderLM
from edge_jax.papers.plm import bench as M
from edge_jax.papers.plm.kv_cache import cache_bytes

TINY = ["--d-model", "32", "--heads", "2", "--head-dim", "8", "--d-rope", "4", "--kv-lora-rank", "8",
        "--d-ff", "32", "--vocab", "32", "--decode-steps", "2", "--repeats", "1"]


def test_bench_prints_rows_and_ratios(capsys):
    assert main(["bench", "mla-decode", *TINY, "--contexts", "16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("mla-decode benchmark: d_model 32, 2 layers, 2 heads x (8 + 4 rope), d_c 8")
    assert "MHA twin: 2 KV heads x 8" in lines[0]
    assert "MLA 12 values (d_c 8 + d_rope 4) vs MHA 32 (2 x 2 x 8) = 0.3750" in "\n".join(lines)
    head = next(i for i, line in enumerate(lines) if "absorbed/naive" in line)
    assert "absorbed/MHA" in lines[head] and "MLA MB/seq" in lines[head]
    row = lines[head + 1].split()
    assert row[0] == "16" and len(row) == 8
    tok_s = [float(v) for v in row[3:6]]
    assert all(v > 0 for v in tok_s)
    assert abs(float(row[6]) - tok_s[1] / tok_s[0]) < 2e-3 * float(row[6]) + 1e-3
    assert abs(float(row[7]) - tok_s[1] / tok_s[2]) < 2e-3 * float(row[7]) + 1e-3
    goal = next(line for line in lines if "absorbed >= 1.5x naive" in line)
    assert "met" in goal and "largest context given" in goal


def test_filled_cache_sets_index_and_sizes():
    mla, gqa, *_ = M.bench_configs(_args("--contexts", "16"))
    cache = M.filled_cache(DecoderLM(mla), 1, context=10, slots=14)
    layer = cache[1]
    assert int(cache_index(cache)) == 10 and layer["c_kv"].shape == (1, 14, 8)
    assert float(jnp.abs(layer["c_kv"]).sum()) > 0
    assert cache_bytes(DecoderLM(mla), 1, 14)["bytes_per_token"] == 2 * 12 * 4
    assert cache_bytes(DecoderLM(gqa), 2, 5)["bytes_per_token"] == 2 * 32 * 4


def test_bad_flags_are_one_line_errors(capsys):
    for extra, needle in ((["--kv-heads", "3"], "multiple of --kv-heads"), (["--contexts", "1k"], "--contexts"),
                          (["--decode-steps", "0"], "argument --decode-steps: needs an integer >= 1"),
                          (["--preset", "tiny"], "--preset")):
        assert main(["bench", "mla-decode", *TINY, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("edge-jax: error:") and needle in err and "\n" not in err


def _args(*extra):
    import argparse

    from edge_jax.bench import command
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(["mla-decode", *TINY, *extra])


def test_json_keeps_measurements_report_and_provenance(tmp_path, capsys):
    import json
    out = tmp_path / "bench.json"
    assert main(["bench", "mla-decode", *TINY, "--repeats", "3", "--contexts", "16,24", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    d = json.loads(out.read_text())
    assert d["report"].strip() == printed.strip() and "per-round ratios, median [p25-p75] over 3 rounds" in printed
    assert d["provenance"]["command"] and d["provenance"]["date"]
    r = d["result"]
    assert r["shape"]["kv_lora_rank"] == 8 and r["repeats"] == 3 and sorted(r["contexts"]) == ["16", "24"]
    x = r["contexts"]["24"]
    t = x["tokens_per_s"]
    assert abs(x["absorbed_vs_naive"] - t["absorbed"] / t["naive"]) < 1e-9
    lo, hi = x["round_ratio_p25_p75"]["absorbed_vs_naive"]
    assert 0 < lo <= x["round_ratio"]["absorbed_vs_naive"] <= hi
