"""`parquet:<glob>` and `jsonl:<glob>` data sources: streaming, splits, cache keys, errors."""
import gzip
import json
import os
import random
import string

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from edge_jax.data import DataError, get_tokenizer, resolve


def _texts(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_lowercase + " \n") for _ in range(rng.randint(20, 200))) for _ in range(n)]


def _parquet(path, texts, row_group=None, key="text"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table = pa.table({key: texts, "id": list(range(len(texts)))})
    pq.write_table(table, path, row_group_size=row_group)


def _jsonl(path, records, gz=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if gz else open
    with opener(path, "wt") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def test_parquet_streams_row_groups_and_splits_by_record(tmp_path, monkeypatch):
    texts = _texts(400, 0)
    _parquet(str(tmp_path / "a.parquet"), texts, row_group=50)
    assert pq.ParquetFile(tmp_path / "a.parquet").num_row_groups == 8
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("read a whole file"))
    src = resolve(f"parquet:{tmp_path}/*.parquet")
    train, val = src.documents("train"), src.documents("validation")
    assert val and train and sorted(train + val) == sorted(texts)       # one file: ~2% of records
    assert len(val) < 0.1 * len(texts) and src.documents("validation") == val
    batches = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *a, **k):
        for b in real(self, *a, **k):
            batches.append(b.num_rows)
            yield b
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    assert resolve(f"parquet:{tmp_path}/*.parquet").documents("train") == train
    assert batches and max(batches) <= 1024 and sum(batches) == 400


def test_jsonl_and_gzip_split_by_file_when_there_are_many(tmp_path):
    files = {f"part{i:03d}.jsonl" + (".gz" if i % 2 else ""): _texts(2, i) for i in range(200)}
    for name, texts in files.items():
        _jsonl(str(tmp_path / "d" / name), [{"text": t, "n": 1} for t in texts] + [{"text": ""}],
               gz=name.endswith(".gz"))
    src = resolve(f"jsonl:{tmp_path}/d/*.jsonl*")
    train, val = src.documents("train"), src.documents("validation")
    every = [t for texts in files.values() for t in texts]
    assert sorted(train + val) == sorted(every) and val and train   # the empty texts are skipped
    held_out = {"part166.jsonl", "part190.jsonl"}  # the names whose hash falls in the ~2% (by file)
    assert sorted(val) == sorted(t for n in held_out for t in files[n])


def test_the_key_follows_the_files_and_the_text_field(tmp_path):
    _parquet(str(tmp_path / "a.parquet"), _texts(5, 1))
    key = resolve(f"parquet:{tmp_path}/a.parquet").key
    assert resolve(f"parquet:{tmp_path}/a.parquet").key == key
    assert resolve(f"parquet:{tmp_path}/a.parquet", text_key="id").key != key
    _parquet(str(tmp_path / "a.parquet"), _texts(6, 2))
    os.utime(tmp_path / "a.parquet", ns=(1, 10**18))
    assert resolve(f"parquet:{tmp_path}/a.parquet").key != key


def test_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="matches no files"):
        resolve(f"jsonl:{tmp_path}/none/*.jsonl")
    _parquet(str(tmp_path / "p" / "x.parquet"), _texts(3, 3), key="content")
    with pytest.raises(DataError, match=r"x.parquet has no field 'text' \(it has content, id\); set data.text_key"):
        resolve(f"parquet:{tmp_path}/p/*.parquet").documents("train")
    with pytest.raises(DataError, match="field 'id' is a int, not text"):
        resolve(f"parquet:{tmp_path}/p/*.parquet", text_key="id").documents("train")
    _jsonl(str(tmp_path / "j" / "a.jsonl"), [{"text": "fine"}, "{broken", ])
    with pytest.raises(DataError, match="a.jsonl line 2 is not JSON"):
        resolve(f"jsonl:{tmp_path}/j/*.jsonl").documents("train") + resolve(f"jsonl:{tmp_path}/j/*.jsonl").documents(
            "validation")
    _jsonl(str(tmp_path / "k" / "a.jsonl"), ["[1]"])
    with pytest.raises(DataError, match="line 1 is a JSON list, not an object"):
        list(resolve(f"jsonl:{tmp_path}/k/*.jsonl").iter_documents("train"))
    _jsonl(str(tmp_path / "m" / "a.jsonl"), [{"body": "x"}])
    with pytest.raises(DataError, match=r"line 1 has no field 'text' \(it has body\)"):
        list(resolve(f"jsonl:{tmp_path}/m/*.jsonl").iter_documents("train"))
    with pytest.raises(DataError, match="a remote glob cannot use \\*\\*"):
        resolve("parquet:gs://bucket/**/*.parquet")
    with pytest.raises(DataError, match="did you mean 'jsonl:'"):
        resolve("jsonl")


def test_mixture_and_the_pipeline_read_them(tmp_path):
    _parquet(str(tmp_path / "p" / "a.parquet"), _texts(300, 4), row_group=64)
    _jsonl(str(tmp_path / "j" / "b.jsonl"), [{"text": t} for t in _texts(300, 5)])
    name = f"parquet:{tmp_path}/p/*.parquet+jsonl:{tmp_path}/j/*.jsonl"
    src = resolve(name)
    assert len(src.documents("train")) > 550
    from edge_jax.config import load_config
    from edge_jax.data import make_eval_batches
    data = load_config("configs/lm.py:size=tiny", {"data.name": name, "data.seq_len": 16, "data.batch_size": 2,
                                                   "data.data_dir": str(tmp_path / "cache")}).data
    tok = get_tokenizer("byte", name, data.data_dir)
    batches = make_eval_batches(data, tok)
    assert batches and np.asarray(batches[0]["inputs"]).shape == (2, 16)


def test_a_data_directory_in_a_bucket_is_one_line_naming_what_goes_there(monkeypatch):
    from edge_jax.data import DataError, get_tokenizer, resolve
    with pytest.raises(DataError, match=r"^the data directory gs://b/data \(EDGE_JAX_DATA or data.data_dir\) "
                                        r"cannot be in a bucket: .*data.tokens_dir=gs://\.\.\.\)$"):
        resolve("pystdlib", "gs://b/data")
    monkeypatch.setenv("EDGE_JAX_DATA", "gs://b/data")
    with pytest.raises(DataError, match="cannot be in a bucket"):
        get_tokenizer("byte", "pystdlib")
