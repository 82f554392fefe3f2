"""``edge-jax bench data``: the generated corpora (deterministic, sized, the same documents in JSONL and
parquet), the minimal loop (every token once, windows as the library cuts them), the report's goal lines."""
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from edge_jax.bench import corpus, data_probe
from edge_jax.bench import data as bench_data
from edge_jax.cli import main
from edge_jax.data.tokenizers import ByteTokenizer

SIZE = 2_000_000


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("corpora"))
    return root, {fmt: corpus.corpus_dir(root, fmt, SIZE) for fmt in corpus.FORMATS}


def _jsonl(folder):
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl"):
            with open(os.path.join(folder, name)) as f:
                rows += [json.loads(line) for line in f]
    return rows


def _parquet(folder):
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".parquet"):
            rows += pq.read_table(os.path.join(folder, name)).to_pylist()
    return rows


def test_a_corpus_is_deterministic_sized_and_cached(corpora, tmp_path):
    root, folders = corpora
    rows = _jsonl(folders["jsonl"])
    assert abs(sum(len(r["text"]) for r in rows) - SIZE) <= 0.02 * SIZE
    assert [r["id"] for r in rows] == list(range(len(rows)))
    again = corpus.corpus_dir(str(tmp_path), "jsonl", SIZE)   # another root: generated again, the same bytes
    with open(os.path.join(again, "part-00000.jsonl"), "rb") as a, \
            open(os.path.join(folders["jsonl"], "part-00000.jsonl"), "rb") as b:
        assert a.read() == b.read()
    stamp = os.path.getmtime(os.path.join(again, corpus.MARKER))
    assert corpus.corpus_dir(str(tmp_path), "jsonl", SIZE) == again      # reused, not rewritten
    assert os.path.getmtime(os.path.join(again, corpus.MARKER)) == stamp
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


def test_parquet_and_jsonl_hold_the_same_documents(corpora):
    _, folders = corpora
    assert _parquet(folders["parquet"]) == _jsonl(folders["jsonl"])
    meta = pq.ParquetFile(os.path.join(folders["parquet"], "part-00000.parquet")).metadata
    assert all(meta.row_group(i).num_rows <= corpus.CHUNK_DOCS for i in range(meta.num_row_groups))


def test_the_same_documents_whatever_the_processes_and_files(tmp_path):
    one = [d for _, g in corpus.file_groups(1_500_000, processes=1) for d in g]
    two = [d for _, g in corpus.file_groups(1_500_000, processes=2) for d in g]
    assert one == two
    info = corpus.write_corpus(str(tmp_path), "parquet", SIZE, file_bytes=500_000, processes=1)
    assert info["files"] == 4 and sorted(os.listdir(tmp_path)) == [f"part-0000{i}.parquet" for i in range(4)]
    assert info["text_bytes"] == sum(len(r["text"]) for r in _parquet(str(tmp_path)))


def test_documents_look_like_web_text():
    docs = [d for k in range(4) for d in corpus.chunk(0, k)]
    lengths = np.array([len(d) for d in docs])
    assert 2000 < np.median(lengths) < 4500 and lengths.max() <= corpus.DOC_MAX + 2000
    text = "".join(docs[:200])
    words = text.split()
    assert 3.5 < np.mean([len(w) for w in words]) < 6.5
    assert "\n\n" in text and any(c.isdigit() for c in text) and text[0].isupper()
    assert sum(w == "the" for w in words) / len(words) > 0.03                # Zipf: the commonest word
    assert corpus.SAFE.issuperset(text)


def test_the_minimal_loop_reads_every_token_once(corpora):
    _, folders = corpora
    tok = ByteTokenizer()
    direct = sum(len(r["text"].encode()) + 1 for r in _jsonl(folders["jsonl"]))
    for fmt, folder in folders.items():
        paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(fmt))
        stream = np.concatenate(list(data_probe.token_stream(fmt, paths, tok)))
        assert len(stream) == direct and (stream == tok.eos_id).sum() == len(_jsonl(folders["jsonl"]))
        batches = list(data_probe.minimal_batches(fmt, paths, tok, batch=4, seq_len=256, epochs=1))
        assert len(batches) == (direct - 1) // (4 * 256)
        inputs = np.concatenate([b["inputs"].ravel() for b in batches])
        targets = np.concatenate([b["targets"].ravel() for b in batches])
        assert (inputs == stream[:len(inputs)]).all() and (targets == stream[1:len(inputs) + 1]).all()


def test_a_probe_measures_rate_memory_and_first_batch(corpora):
    _, folders = corpora
    spec = dict(mode="minimal", name=f"parquet:{folders['parquet']}/*.parquet", tokenizer="byte", seq_len=256,
                batch=4, data_dir="", workers=0, tokens=2_000_000, seconds=1.0, warmup_s=0.0, segments=3)
    m = data_probe.measure(spec)
    assert m["tokens_per_s"] > 0 and m["first_batch_s"] > 0 and len(m["rates"]) == 3
    assert m["peak_total_mb"] >= m["peak_main_mb"] > 10


def test_trained_tokenizers_are_cached_and_load(tmp_path):
    from edge_jax.data import get_tokenizer
    specs = bench_data.tokenizer_specs(str(tmp_path), ["byte", "spm", "hf"])
    paths = [s.split(":", 1)[1] for s in specs.values() if ":" in s]
    stamps = [os.path.getmtime(p) for p in paths]
    assert bench_data.tokenizer_specs(str(tmp_path), ["spm", "hf"]) == {k: specs[k] for k in ("spm", "hf")}
    assert [os.path.getmtime(p) for p in paths] == stamps
    for spec in specs.values():
        tok = get_tokenizer(spec, "unused", str(tmp_path))
        assert tok.eos_id >= 0 and tok.decode(tok.encode("The cat sat, twice.")) == "The cat sat, twice."
        if spec != "byte":
            assert tok.vocab_size == bench_data.TOKENIZER_VOCAB


def _cell(rate, peak, first=1.0):
    return {"tokens_per_s": rate, "min": rate * 0.9, "max": rate * 1.1, "first_batch_s": first,
            "worst_first_batch_s": first, "peak_total_mb": peak, "peak_main_mb": peak / 2, "runs": []}


def test_the_report_states_each_goal():
    results = {("jsonl", 10**8, "spm", "minimal"): _cell(2e6, 300), ("jsonl", 10**8, "spm", 1): _cell(1.9e6, 400),
               ("jsonl", 10**8, "spm", 2): _cell(3.0e6, 600), ("jsonl", 10**9, "spm", "minimal"): _cell(2e6, 310),
               ("jsonl", 10**9, "spm", 1): _cell(1.5e6, 480, first=12.0), ("jsonl", 10**9, "spm", 2): _cell(2.4e6, 620),
               ("jsonl", 10**9, "byte", "minimal"): {"error": "timed out after 9 s", "runs": []}}
    text = "\n".join(bench_data.table(results) + bench_data.goal_lines(results, [10**8, 10**9])
                     + bench_data.scaling_lines(results, [1, 2]))
    assert "0.95" in text and "0.75" in text                               # ratios to the minimal loop
    assert "worst max/min 1.200 (jsonl spm stream w1) (goal <= 1.10): goal missed" in text
    assert "time to first batch: worst 12.00 s (jsonl 1G spm stream w1) (goal < 10 s): goal missed" in text
    assert "iterator / minimal loop: worst 0.75 (jsonl 1G spm stream w1) (goal >= 0.9): goal missed" in text
    assert "failed: timed out after 9 s" in text and "failed measurements: 1" in text
    assert "per-host rate the paper presets need" in text
    assert "1.50M tok/s at 1 worker(s), 2.40M at 2 (x1.60, 80% per worker)" in text


def test_the_paper_rate_comes_from_the_compile_tables():
    from edge_jax.bench.host_rate import paper_host_rate
    rate, where = paper_host_rate()
    assert 50_000 < rate < 1_000_000 and "paper_compile.json" in where


def test_bench_data_prints_the_table(tmp_path, capsys):
    args = ["bench", "data", "--sizes", "1M,2M", "--formats", "parquet", "--tokenizers", "byte", "--workers", "0",
            "--seq-len", "128", "--batch-size", "2", "--tokens", "1e6", "--seconds", "0.3", "--warmup", "0",
            "--corpus-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "parquet     1M  byte      minimal" in out and "parquet     2M  byte      stream w0" in out
    for goal in ("peak memory across sizes", "time to first batch", "iterator / minimal loop"):
        assert goal in out
    assert out.count("goal met") + out.count("goal missed") == 3


def test_bench_data_shards_reads_a_copy_and_counts_reads_per_batch(tmp_path, capsys):
    copy = tmp_path / "copy"
    args = ["bench", "data", "--shards", str(copy), "--windows-per-read", "1,4", "--sizes", "1M", "--seq-len", "64",
            "--batch-size", "8", "--seconds", "0.2", "--segments", "2", "--corpus-dir", str(tmp_path / "c")]
    assert main(args) == 0
    out = capsys.readouterr().out
    label = str(copy)[-34:]
    cells = [line[:38].split() for line in out.splitlines() if line.startswith(("local disk", label))]
    assert cells == [["local", "disk", "1"], ["local", "disk", "4"], [label, "1"], [label, "4"]], out
    assert "per-host need: " in out
    from edge_jax.bench.shard_reads import measure
    local = next(p for p in (tmp_path / "c" / "shard-reads").iterdir())
    copied = copy / local.name
    assert sorted(os.listdir(copied)) == sorted(os.listdir(local))  # the copy holds every shard and the manifest
    one, four = (measure(str(copied), 64, 8, k, 0.2, 10**9, 2) for k in (1, 4))
    # 8 random windows: 8 reads (two that touch: one; one across a shard end: two); blocks of 4: one read a block
    assert 7 <= one["requests_per_batch"] <= 9 and 1 <= four["requests_per_batch"] <= 3 and four["tokens_per_s"] > 0
