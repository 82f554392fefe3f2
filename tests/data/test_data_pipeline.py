"""Prepared token shards, the training iterator over them (state, sharding), eval batches and load_qa
(the streamed iterator: tests/data/test_stream.py)."""
import json
import os
import sys

import ml_collections
import numpy as np
import pytest
from etils import epath

from edge_jax.data import (
    DataError,
    data_dir_default,
    get_tokenizer,
    load_qa,
    make_eval_batches,
    make_train_iter,
    resolve_cfg,
    shards,
    split_tokens,
)
from edge_jax.data.pipeline import Windows
from edge_jax.data.tokenizers import tokenizer_dtype


def _cfg(data_dir, **kw):
    base = dict(name="facts", tokenizer="byte", seq_len=32, batch_size=4, data_dir=str(data_dir),
                text_key="text", facts_entities=20, longctx_length=4096, longctx_examples=200, stream="off",
                workers=0, shuffle_windows=4, tokens_dir="")
    base.update(kw)
    return ml_collections.ConfigDict(base)


def _numbered_text(tmp_path, lines=3000):
    """A text: dataset whose every window is different (numbered lines)."""
    path = tmp_path / "numbers.txt"
    path.write_text("".join(f"line {i:05d}\n" for i in range(lines)))
    return f"text:{path}"


def _take(it, n):
    return [next(it) for _ in range(n)]


def test_data_dir_default(monkeypatch):
    monkeypatch.setenv("EDGE_JAX_DATA", "/somewhere")
    assert data_dir_default() == "/somewhere"
    monkeypatch.delenv("EDGE_JAX_DATA")
    assert data_dir_default() == os.path.expanduser("~/.cache/edge_jax")


def test_shards_are_written_once_and_read_in_slices(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    source = resolve_cfg(cfg)
    tokens = split_tokens(source, "train", tok, str(tmp_path))
    assert os.listdir(tmp_path / "tokens") == [f"{source.key}-train-byte"]
    files = sorted(os.listdir(tmp_path / "tokens" / f"{source.key}-train-byte"))
    assert files[-1] == "manifest.json" and all(f.endswith(".bin") for f in files[:-1])  # no temporary files
    assert len(files) - 1 == len(source.pieces("train", 64)) > 1
    monkeypatch.setattr("edge_jax.data.shards._write_piece", lambda *a: pytest.fail("prepared again"))
    again = split_tokens(source, "train", tok, str(tmp_path))
    np.testing.assert_array_equal(again[5:7000], np.asarray(tokens)[5:7000])   # across shard boundaries
    docs = source.documents("train")
    assert len(tokens) == sum(len(d.encode()) + 1 for d in docs)
    eos = np.flatnonzero(np.asarray(tokens) == tok.eos_id)
    assert len(eos) == len(docs) and eos[-1] == len(tokens) - 1
    assert tok.decode(tokens[:eos[0]]) == docs[0]


def test_a_second_job_preparing_the_same_split_finishes(tmp_path, monkeypatch):
    """Two jobs on one host (two grid streams) may prepare one split at once: the one that moves its
    shard or manifest into place second replaces the same bytes instead of failing."""
    cfg = _cfg(tmp_path)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    source = resolve_cfg(cfg)
    first = np.asarray(split_tokens(source, "train", tok, str(tmp_path)))
    root = tmp_path / "tokens" / f"{source.key}-train-byte"
    shard = epath.Path(root / "00000.bin")
    before = shard.read_bytes()
    shards._write_piece(source.pieces("train", 64)[0], tok, tokenizer_dtype(tok), shard)  # the target exists
    assert shard.read_bytes() == before
    monkeypatch.setattr(shards, "is_prepared", lambda root: False)  # it looked before the other job finished
    np.testing.assert_array_equal(np.asarray(split_tokens(source, "train", tok, str(tmp_path))), first)
    assert not [f for f in os.listdir(root) if f.endswith(".tmp")]


def test_train_batches_shape_shift_and_determinism(tmp_path):
    cfg = _cfg(tmp_path)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    a = _take(make_train_iter(cfg, tok, seed=1), 6)
    b = _take(make_train_iter(cfg, tok, seed=1), 6)
    c = _take(make_train_iter(cfg, tok, seed=2), 6)
    for x in a:
        assert set(x) == {"inputs", "targets"}
        assert x["inputs"].shape == x["targets"].shape == (4, 32)
        assert x["inputs"].dtype == x["targets"].dtype == np.int32
        np.testing.assert_array_equal(x["inputs"][:, 1:], x["targets"][:, :-1])
    assert all((x["inputs"] == y["inputs"]).all() for x, y in zip(a, b))
    assert not all((x["inputs"] == y["inputs"]).all() for x, y in zip(a, c))


def test_state_restore_replays_the_same_batches(tmp_path):
    cfg = _cfg(tmp_path, name=_numbered_text(tmp_path, 300), seq_len=16, batch_size=4)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    it = make_train_iter(cfg, tok, seed=3)
    epoch = len(Windows(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)), 16)) // 4
    _take(it, epoch - 2)  # the state is taken just before an epoch boundary
    state = json.loads(json.dumps(it.get_state()))
    expected = _take(it, 5)
    fresh = make_train_iter(cfg, tok, seed=3)
    fresh.set_state(state)
    for x, y in zip(expected, _take(fresh, 5)):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])
        np.testing.assert_array_equal(x["targets"], y["targets"])


def test_epochs_cover_every_window_and_reshuffle(tmp_path):
    cfg = _cfg(tmp_path, name=_numbered_text(tmp_path, 400), seq_len=16, batch_size=4)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    windows = Windows(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)), 16)
    per_epoch = len(windows) // 4
    it = make_train_iter(cfg, tok, seed=0)
    first = np.concatenate([b["inputs"] for b in _take(it, per_epoch)])
    second = np.concatenate([b["inputs"] for b in _take(it, per_epoch)])
    every = {tuple(windows[i][:-1]) for i in range(len(windows))}
    assert {tuple(r) for r in first} <= every and len({tuple(r) for r in first}) == len(first)
    assert not (first == second).all()


def test_row_blocks_make_the_same_global_batches_for_any_process_count(tmp_path):
    cfg = _cfg(tmp_path, name=_numbered_text(tmp_path, 600), seq_len=16, batch_size=8)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    steps = 2 * len(Windows(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)), 16)) // 8 + 3  # past an epoch
    whole = _take(make_train_iter(cfg, tok, seed=5), steps)
    for blocks in (2, 4):
        parts = [_take(make_train_iter(cfg, tok, seed=5, block=j, blocks=blocks), steps) for j in range(blocks)]
        assert parts[0][0]["inputs"].shape == (8 // blocks, 16)
        for k in range(steps):  # global batch k: the blocks' rows in block order, the same rows as one process's
            for key in ("inputs", "targets"):
                np.testing.assert_array_equal(np.concatenate([p[k][key] for p in parts]), whole[k][key])
    it = make_train_iter(cfg, tok, seed=5, block=1, blocks=2)
    _take(it, 3)
    assert it.get_state()["next_index"] == 3  # global batches read, the same count in every process
    with pytest.raises(DataError, match="divisible"):
        make_train_iter(_cfg(tmp_path, batch_size=6), tok, 0, block=0, blocks=4)


def test_too_long_seq_len_is_one_line_with_fix(tmp_path):
    cfg = _cfg(tmp_path, facts_entities=4, seq_len=4096, batch_size=8)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    with pytest.raises(DataError) as err:
        make_train_iter(cfg, tok, seed=0)
    msg = str(err.value)
    n = len(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)))
    assert "\n" not in msg and "seq_len 4096" in msg and f"{n} tokens" in msg
    assert "lower data.seq_len" in msg


def test_unknown_dataset_is_one_line_with_fix(tmp_path):
    tok = get_tokenizer("byte", "facts", str(tmp_path))
    with pytest.raises(DataError) as err:
        make_train_iter(_cfg(tmp_path, name="factz"), tok, seed=0)
    msg = str(err.value)
    assert "\n" not in msg and "did you mean 'facts'" in msg and "valid names" in msg


def test_eval_batches_cover_the_split_with_mask(tmp_path):
    cfg = _cfg(tmp_path, seq_len=24, batch_size=5)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    tokens = np.asarray(split_tokens(resolve_cfg(cfg), "validation", tok, str(tmp_path)))
    batches = make_eval_batches(cfg, tok)
    n_windows = -(-(len(tokens) - 1) // 24)
    assert len(batches) == -(-n_windows // 5)
    for b in batches:
        assert b["inputs"].shape == b["targets"].shape == b["mask"].shape == (5, 24)
        assert b["mask"].dtype == np.float32 and b["inputs"].dtype == np.int32
    mask = np.concatenate([b["mask"] for b in batches]).reshape(-1)
    targets = np.concatenate([b["targets"] for b in batches]).reshape(-1)
    assert mask.sum() == len(tokens) - 1
    np.testing.assert_array_equal(targets[mask == 1], tokens[1:])
    assert (targets[mask == 0] == tok.pad_id).all() and batches[-1]["mask"][-1].sum() == 0
    again = make_eval_batches(cfg, tok)
    assert all((x["inputs"] == y["inputs"]).all() for x, y in zip(batches, again))
    assert len(make_eval_batches(cfg, tok, num_batches=1)) == 1
    train_eval = make_eval_batches(cfg, tok, split="train", num_batches=2)
    assert len(train_eval) == 2 and train_eval[0]["mask"].all()
    with pytest.raises(DataError, match="no split 'test'"):
        make_eval_batches(cfg, tok, split="test")


def test_spm_pipeline_and_combined_dataset(tmp_path):
    name = f"{_numbered_text(tmp_path, 500)}+facts"
    cfg = _cfg(tmp_path, name=name, seq_len=16, batch_size=4)
    tok = get_tokenizer("spm:400", name, str(tmp_path))
    source = resolve_cfg(cfg)
    tokens = split_tokens(source, "train", tok, str(tmp_path))
    parts = [split_tokens(p, "train", tok, str(tmp_path)) for p in source.parts]
    np.testing.assert_array_equal(tokens, np.concatenate(parts))
    batch = next(make_train_iter(cfg, tok, seed=0))
    assert batch["inputs"].max() < tok.vocab_size
    assert len(load_qa(cfg, str(tmp_path))) == 10 * 6  # questions of the facts part


def test_spm_from_data_config(tmp_path):
    tok = get_tokenizer("spm:400", _cfg(tmp_path, facts_entities=10), str(tmp_path))
    assert os.listdir(tmp_path / "tokenizers") == ["facts-n10_s0-v1.0.0-spm400.model"]
    text = "Question: What pet does Fa Pejohar have?\nAnswer: dog"
    assert tok.decode(tok.encode(text)) == text


def test_load_qa(tmp_path):
    qa = load_qa(_cfg(tmp_path), "")
    assert len(qa) == 10 * 6 and all(set(q) == {"prompt", "answer", "task"} for q in qa)
    long_qa = load_qa(_cfg(tmp_path, name="longctx", longctx_length=512, longctx_examples=8), "")
    assert {q["task"] for q in long_qa} == {"passkey", "multikey", "aggregate", "fewshot", "vartrack"}
    with pytest.raises(DataError, match="no question split"):
        load_qa(_cfg(tmp_path, name=_numbered_text(tmp_path)), str(tmp_path))


@pytest.mark.slow
def test_full_pystdlib_spm_pipeline(tmp_path):
    cfg = _cfg(tmp_path, name="pystdlib", tokenizer="spm:4096", seq_len=256, batch_size=16)
    tok = get_tokenizer(cfg.tokenizer, cfg.name, str(tmp_path))
    assert tok.vocab_size == 4096
    batch = next(make_train_iter(cfg, tok, seed=0))
    assert batch["inputs"].shape == (16, 256)
    assert len(make_eval_batches(cfg, tok)) > 10


def test_no_tensorflow_imported():
    assert "tensorflow" not in sys.modules
