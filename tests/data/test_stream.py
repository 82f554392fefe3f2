"""The streamed train iterator (edge_jax.data.stream) and pieces: against the plain reading, exact resume,
the same global batches for any number of processes or grain workers, bounded reading, mixtures."""
import json
import os
import random
import string

import ml_collections
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from edge_jax.data import DataError, get_tokenizer, make_eval_batches, make_train_iter, resolve
from edge_jax.data.pipeline import streams
from edge_jax.data.stream import Plan, _reference_row_windows, row_windows, usable_workers


def _docs(n, seed, tag=""):
    rng = random.Random(seed)
    letters = string.ascii_lowercase + " \n"
    return [tag + f"{seed}-{i} " + "".join(rng.choice(letters) for _ in range(rng.randint(5, 600))) for i in range(n)]


def _jsonl(path, texts):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)


def _parquet(path, texts, row_group=40):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"text": texts}), path, row_group_size=row_group)


def _cfg(tmp_path, name, **kw):
    base = dict(name=name, tokenizer="byte", seq_len=32, batch_size=4, data_dir=str(tmp_path / "cache"),
                text_key="text", facts_entities=20, longctx_length=4096, longctx_examples=200, stream="auto",
                workers=0, shuffle_windows=4, tokens_dir="")
    return ml_collections.ConfigDict({**base, **kw})


@pytest.fixture
def corpus(tmp_path):
    for f in range(2):
        _jsonl(str(tmp_path / "j" / f"part{f}.jsonl"), _docs(150, f))
    _parquet(str(tmp_path / "p" / "a.parquet"), _docs(300, 7))
    return tmp_path


def _take(it, n):
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("glob", ["jsonl:{}/j/*.jsonl", "parquet:{}/p/*.parquet"])
def test_finer_pieces_read_the_same_documents(corpus, glob):
    source = resolve(glob.format(corpus))
    for split in ("train", "validation"):
        whole = source.pieces(split, 1)
        cut = source.pieces(split, 40)
        assert len(cut) >= 8 * len(whole)   # byte ranges of the JSONL files, the 8 row groups of the parquet file
        assert [t for p in cut for t, _ in p.read()] == [t for p in whole for t, _ in p.read()]
    train, val = source.documents("train"), source.documents("validation")
    assert val and not set(train) & set(val)


@pytest.mark.parametrize("glob", ["jsonl:{}/j/*.jsonl", "parquet:{}/p/*.parquet"])
def test_a_piece_restarts_from_any_position_it_reported(corpus, glob):
    piece = resolve(glob.format(corpus)).pieces("train", 8)[3]
    read = list(piece.read())
    for i in (1, len(read) // 2, len(read) - 1):
        assert list(piece.read(read[i - 1][1])) == read[i:]


@pytest.mark.parametrize("name", ["jsonl:{}/j/*.jsonl", "parquet:{}/p/*.parquet", "facts", "pystdlib+facts*2"])
def test_rows_match_the_plain_reading(corpus, name, monkeypatch):
    monkeypatch.setenv("EDGE_JAX_PYSTDLIB_MAX_FILES", "20")
    cfg = _cfg(corpus, name.format(corpus), stream="on")
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    it = make_train_iter(cfg, tok, seed=3)
    got = _take(it, 14)
    for row in (0, 3):
        expected = _reference_row_windows(it.plan, row, 14)
        np.testing.assert_array_equal(np.stack([b["inputs"][row] for b in got]), np.stack(expected)[:, :-1])
        np.testing.assert_array_equal(np.stack([b["targets"][row] for b in got]), np.stack(expected)[:, 1:])
    it.close()


def test_spm_rows_match_the_plain_reading(corpus):
    cfg = _cfg(corpus, f"jsonl:{corpus}/j/*.jsonl", tokenizer="spm:400")
    tok = get_tokenizer(cfg.tokenizer, cfg, cfg.data_dir)
    it = make_train_iter(cfg, tok, seed=0)
    got = _take(it, 6)
    np.testing.assert_array_equal(np.stack([b["inputs"][1] for b in got]),
                                  np.stack(_reference_row_windows(it.plan, 1, 6))[:, :-1])
    assert max(int(b["inputs"].max()) for b in got) < tok.vocab_size


def test_a_row_resumes_exactly_from_every_state(corpus):
    source = resolve(f"jsonl:{corpus}/j/*.jsonl")
    plan = Plan(tuple(source.pieces("train", 16)), 4, 32, 3, 11, get_tokenizer("byte", "facts"))
    run = row_windows(plan, 2)
    seen = [next(run) for _ in range(60)]   # several chunks, pieces and epochs' worth of documents
    assert any(state[2] for _, state in seen)   # some states start inside a document
    for i in (0, 1, 2, 7, 29, 45):
        again = row_windows(plan, 2, seen[i][1])
        for window, state in seen[i + 1:i + 12]:
            w, s = next(again)
            np.testing.assert_array_equal(w, window)
            assert s == state


def test_state_resumes_the_iterator_and_fits_json(corpus):
    cfg = _cfg(corpus, f"parquet:{corpus}/p/*.parquet")
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    it = make_train_iter(cfg, tok, seed=1)
    _take(it, 9)
    state = json.loads(json.dumps(it.get_state()))
    assert len(json.dumps(state)) < 400 and sorted(state["stream_rows"]) == ["0", "1", "2", "3"]
    expected = _take(it, 6)
    fresh = make_train_iter(cfg, tok, seed=1)
    fresh.set_state(state)
    for x, y in zip(expected, _take(fresh, 6)):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])
    with pytest.raises(DataError, match="not a stream's"):
        fresh.set_state({"next_index": 3})


def test_process_blocks_make_the_same_global_batches_and_state(corpus):
    cfg = _cfg(corpus, f"jsonl:{corpus}/j/*.jsonl", batch_size=8)
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    whole = make_train_iter(cfg, tok, seed=5)
    batches = _take(whole, 12)
    for blocks in (2, 4):
        parts = [make_train_iter(cfg, tok, seed=5, block=j, blocks=blocks) for j in range(blocks)]
        got = [_take(p, 12) for p in parts]
        for k in range(12):
            np.testing.assert_array_equal(np.concatenate([g[k]["inputs"] for g in got]), batches[k]["inputs"])
        rows = {}
        for p in parts:
            rows.update(p.get_state()["stream_rows"])   # one process: the rows it holds
        assert rows == whole.get_state()["stream_rows"]


def test_grain_workers_do_not_change_the_batches(corpus):
    assert [usable_workers(w, 6) for w in (0, 1, 2, 4, 5, 9)] == [0, 1, 2, 3, 3, 6]
    cfg = _cfg(corpus, f"jsonl:{corpus}/j/*.jsonl")
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    plain = make_train_iter(cfg, tok, seed=2)
    expected = _take(plain, 10)
    pooled = make_train_iter(_cfg(corpus, cfg.name, workers=2), tok, seed=2)
    try:
        for x, y in zip(expected, _take(pooled, 10)):
            np.testing.assert_array_equal(x["inputs"], y["inputs"])
        assert pooled.get_state() == plain.get_state()
    finally:
        pooled.close()


def test_the_first_batch_reads_a_bounded_share_of_the_corpus(tmp_path, monkeypatch):
    for f in range(4):
        _jsonl(str(tmp_path / "big" / f"{f}.jsonl"), _docs(2000, f))
    from edge_jax.data.file_sources import FileReader
    read, real = [0], FileReader._jsonl

    def counted(self, piece, offset):
        for item in real(self, piece, offset):
            read[0] += 1
            yield item
    monkeypatch.setattr(FileReader, "_jsonl", counted)
    cfg = _cfg(tmp_path, f"jsonl:{tmp_path}/big/*.jsonl")
    it = make_train_iter(cfg, get_tokenizer("byte", cfg.name, cfg.data_dir), seed=0)
    next(it)
    assert 0 < read[0] < 8000 // 4
    assert not os.path.exists(tmp_path / "cache" / "tokens")   # nothing prepared


def test_a_mixture_keeps_its_proportions_when_streamed(tmp_path):
    rng = random.Random(0)
    for part, letters, n in (("a", "abcdefghijklm", 400), ("b", "nopqrstuvwxyz", 100)):
        _jsonl(str(tmp_path / part / f"{part}.jsonl"),
               ["".join(rng.choice(letters) for _ in range(rng.randint(50, 600))) for _ in range(n)])
    name = f"jsonl:{tmp_path}/a/*.jsonl+jsonl:{tmp_path}/b/*.jsonl*3"
    sizes = [sum(map(len, part.documents("train"))) for part in resolve(name).parts[:2]]
    expected = 3 * sizes[1] / (sizes[0] + 3 * sizes[1])    # b's share of the training text, by tokens
    cfg = _cfg(tmp_path, name, batch_size=16, seq_len=64)
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    it = make_train_iter(cfg, tok, seed=0)
    epoch = (sizes[0] + 3 * sizes[1]) // (16 * 64)
    ids = np.concatenate([b["inputs"].reshape(-1) for b in _take(it, 3 * epoch)])
    a_share, b_share = np.isin(ids, list(b"abcdefghijklm")).sum(), np.isin(ids, list(b"nopqrstuvwxyz")).sum()
    assert b_share / (a_share + b_share) == pytest.approx(expected, abs=0.05)


def test_auto_streams_file_corpora_until_prepared_and_eval_is_the_same_either_way(corpus):
    from edge_jax.data.command import prepare_splits
    cfg = _cfg(corpus, f"jsonl:{corpus}/j/*.jsonl")
    tok = get_tokenizer("byte", cfg.name, cfg.data_dir)
    assert streams(cfg, resolve(cfg.name), tok) and not streams(_cfg(corpus, "facts"), resolve("facts"), tok)
    streamed = make_eval_batches(cfg, tok, num_batches=2)
    prepare_splits(cfg, ["train", "validation"], say=lambda line: None)
    assert not streams(cfg, resolve(cfg.name), tok)
    prepared = make_eval_batches(cfg, tok, num_batches=2)
    for x, y in zip(streamed, prepared):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    assert "next_index" in make_train_iter(cfg, tok, seed=0).get_state()   # the prepared shards' iterator
