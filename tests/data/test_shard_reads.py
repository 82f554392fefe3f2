"""Batched window reads from prepared shards (TokenShards.windows: the ranges of a batch merged and read
together) against one range at a time, and the train iterator's blocks of consecutive windows
(data.windows_per_read)."""
import json

import grain
import numpy as np
import pytest
from test_data_pipeline import _cfg, _numbered_text, _take

from edge_jax.data import get_tokenizer, make_train_iter, resolve_cfg, split_tokens
from edge_jax.data.pipeline import Windows
from edge_jax.data.shards import TokenShards


def write_shards(root, sizes, seed=0) -> list[np.ndarray]:
    """Shards of random uint16 tokens (never all zero) of ``sizes`` in ``root`` (a local dir), with a manifest."""
    rng = np.random.default_rng(seed)
    parts = [rng.integers(1, 60000, n).astype("<u2") for n in sizes]
    meta = {"dtype": "uint16", "shards": []}
    for i, ids in enumerate(parts):
        ids.tofile(root / f"{i:05d}.bin")
        meta["shards"].append({"file": f"{i:05d}.bin", "tokens": len(ids)})
    (root / "manifest.json").write_text(json.dumps(meta))
    return parts


def test_batched_windows_equal_one_range_at_a_time(tmp_path):
    flat = np.concatenate(write_shards(tmp_path, [1000, 7, 1, 2500, 640]))
    shards = TokenShards([str(tmp_path)])
    rng = np.random.default_rng(1)
    for length in (1, 33, 129, 1200):  # 1200: windows across two and three shards
        starts = rng.integers(0, len(flat) - length + 1, 48)
        starts[:3] = [0, len(flat) - length, starts[5]]  # both ends, a repeat
        got = shards.windows(starts, length)
        assert got.dtype == np.uint16 and got.shape == (48, length)
        np.testing.assert_array_equal(got, np.stack([shards[s:s + length] for s in starts]))
        np.testing.assert_array_equal(got, np.stack([flat[s:s + length] for s in starts]))
    with pytest.raises(IndexError, match="outside the 4148 tokens"):
        shards.windows([len(flat) - 3], 4)


def test_touching_windows_are_one_read_per_shard(tmp_path):
    write_shards(tmp_path, [100, 100])
    shards = TokenShards([str(tmp_path)])
    # windows of 11 tokens with stride 10 (as training windows: they share a token)
    assert shards.read_plan([0, 10, 20, 50], 11) == [(0, 0, 31), (0, 50, 11)]
    assert shards.read_plan([90, 100], 11) == [(0, 90, 10), (1, 0, 11)]  # split at the shard end, merged after
    assert shards.read_plan([5, 5], 3) == [(0, 5, 3)]


def test_one_window_per_read_makes_the_batches_of_a_window_shuffle(tmp_path):
    """windows_per_read=1 (the default) is the order a plain shuffle of single windows gives (the naive form)."""
    cfg = _cfg(tmp_path, name=_numbered_text(tmp_path, 400), seq_len=16, batch_size=4)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    windows = Windows(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)), 16)
    naive = iter(grain.MapDataset.source(windows).shuffle(seed=7).repeat().batch(4, drop_remainder=True))
    steps = len(windows) // 4 + 3  # past an epoch
    for got, want in zip(_take(make_train_iter(cfg, tok, seed=7), steps), _take(naive, steps)):
        np.testing.assert_array_equal(got["inputs"], want[:, :-1])
        np.testing.assert_array_equal(got["targets"], want[:, 1:])


def test_blocks_of_windows_are_consecutive_cover_the_epoch_and_resume(tmp_path):
    cfg = _cfg(tmp_path, name=_numbered_text(tmp_path, 400), seq_len=16, batch_size=8, windows_per_read=4)
    tok = get_tokenizer("byte", cfg.name, str(tmp_path))
    windows = Windows(split_tokens(resolve_cfg(cfg), "train", tok, str(tmp_path)), 16)
    index = {tuple(windows[i]): i for i in range(len(windows))}
    per_epoch = (len(windows) // 4) // 2
    batches = _take(make_train_iter(cfg, tok, seed=0), per_epoch)
    rows = [index[tuple(np.append(b["inputs"][r], b["targets"][r, -1]))] for b in batches for r in range(8)]
    runs = np.asarray(rows).reshape(-1, 4)
    assert (np.diff(runs, axis=1) == 1).all() and (runs[:, 0] % 4 == 0).all()  # blocks of 4 consecutive windows
    assert len(set(rows)) == len(rows) == per_epoch * 8  # each window once in an epoch
    assert sorted(runs[:, 0]) != list(runs[:, 0])  # the blocks are shuffled
    it = make_train_iter(cfg, tok, seed=0)
    _take(it, 3)
    state, expected = json.loads(json.dumps(it.get_state())), _take(it, 4)
    fresh = make_train_iter(cfg, tok, seed=0)
    fresh.set_state(state)
    for x, y in zip(expected, _take(fresh, 4)):
        np.testing.assert_array_equal(x["inputs"], y["inputs"])
    from edge_jax.data import DataError
    with pytest.raises(DataError, match=r"data.windows_per_read=3 does not divide the 8 rows"):
        make_train_iter(_cfg(tmp_path, name=cfg.name, seq_len=16, batch_size=8, windows_per_read=3), tok, 0)


def test_windows_rows_equal_single_windows(tmp_path):
    write_shards(tmp_path, [300, 5, 700])
    windows = Windows(TokenShards([str(tmp_path)]), 16)
    ids = np.random.default_rng(2).integers(0, len(windows), 20)
    np.testing.assert_array_equal(windows.rows(ids), np.stack([windows[int(i)] for i in ids]))
    np.testing.assert_array_equal(windows.blocks([0, 3], 2), windows.rows([0, 1, 6, 7]))
    assert windows.rows(ids).dtype == np.int32
