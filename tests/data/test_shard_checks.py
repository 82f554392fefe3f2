"""Token ids outside the vocabulary, found when shards are prepared and when they are read."""
import json

import numpy as np
import pytest

from edge_jax.data.errors import DataError
from edge_jax.data.shards import TokenShards, doc_tokens, outside


class _Tok:
    """A tokenizer whose ids for the text "bad" are outside its 300-id vocabulary (70000 > uint16)."""
    vocab_size, eos_id, pad_id, name = 300, 299, 299, "fake"

    def encode_many(self, texts):
        return [np.array([1, 70000 if t == "bad" else 2], np.int32) for t in texts]


def _shards(tmp_path, tokens: list[np.ndarray]) -> TokenShards:
    meta = {"dtype": "uint16", "shards": []}
    for i, ids in enumerate(tokens):
        np.asarray(ids, "<u2").tofile(tmp_path / f"{i:05d}.bin")
        meta["shards"].append({"file": f"{i:05d}.bin", "tokens": len(ids)})
    (tmp_path / "manifest.json").write_text(json.dumps(meta))
    return TokenShards([str(tmp_path)], 300, "fake")


def test_outside_finds_the_first_id_out_of_range():
    assert outside(np.array([0, 299, 5], np.uint16), 300) is None
    assert outside(np.array([0, 300, 301], np.uint16), 300) == 1
    assert outside(np.array([3, -1], np.int32), 300) == 1        # a negative id is outside too
    assert outside(np.zeros(0, np.int32), 300) is None


def test_prepare_refuses_ids_outside_the_vocabulary_before_the_cast_wraps_them():
    assert [list(a) for a in doc_tokens(["ok"], _Tok(), np.dtype(np.uint16))] == [[1, 2, 299]]
    with pytest.raises(DataError, match="tokenizer fake gave id 70000, outside its vocabulary of 300 ids, "
                                        "for the document beginning 'bad'"):
        list(doc_tokens(["ok", "bad"], _Tok(), np.dtype(np.uint16)))


def test_check_names_the_shard_of_the_bad_id(tmp_path):
    shards = _shards(tmp_path, [np.arange(10), np.array([1, 2, 3, 400, 5])])
    shards.check(shards[0:10], 0)                                  # in the vocabulary: nothing
    for start in (0, None):                                        # located from the offset, or by a scan
        with pytest.raises(DataError, match=r"00001.bin holds token id 400 \(its token 3\), outside the vocabulary "
                                            "of 300 ids of tokenizer fake"):
            shards.check(shards[0:15], start)
    assert not TokenShards([str(tmp_path)]).check(shards[0:15])    # vocab 0: not checked


def test_missing_shard_is_named_when_the_shards_open(tmp_path):
    _shards(tmp_path, [np.arange(10), np.arange(5)])
    (tmp_path / "00001.bin").unlink()
    with pytest.raises(DataError, match=r"00001.bin is missing; delete .*manifest.json, then run `edge-jax data "
                                        "prepare`"):
        TokenShards([str(tmp_path)], 300)
