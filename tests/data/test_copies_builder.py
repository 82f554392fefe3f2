"""`edge_copies`: documents of repeated random strings, and the `copies` dataset name."""
import random

import pytest

from edge_jax.data import DataError, resolve
from edge_jax.data.builders import copies


def check_copies(doc: str, length: int) -> None:
    """Exactly `length` characters; every line is one string written 2-4 times (the last line cut)."""
    assert len(doc) == length
    lines = doc.split("\n")
    for i, line in enumerate(lines):
        words = line.split(" ")
        assert len(words) <= copies.MAX_REPEATS and set(words[0]) <= set(copies.ALPHABET)
        if i < len(lines) - 1:
            assert len(words) >= 2 and len(set(words)) == 1
            assert copies.MIN_CHARS <= len(words[0]) <= copies.MAX_CHARS
        else:
            assert set(words[:-1]) <= {words[0]} and words[0].startswith(words[-1])


@pytest.mark.parametrize("length", [120, 511, 2000])
def test_documents_have_the_length_and_repeat_their_strings(length):
    rng = random.Random(3)
    for _ in range(30):
        check_copies(copies.make_document(rng, length), length)


def test_splits_are_pure_and_distinct():
    a = copies.generate_split("train", 300, 20, 0)
    assert a == copies.generate_split("train", 300, 20, 0)
    assert a != copies.generate_split("train", 300, 20, 1)
    val = copies.generate_split("validation", 300, 20, 0)
    assert len(a) == 20 and len(val) == 3 and not {r["text"] for r in a} & {r["text"] for r in val}


def test_builder_prepares_and_mixes_with_longctx(tmp_path):
    source = resolve("copies", str(tmp_path), longctx_length=300, longctx_examples=8)
    assert source.key == "copies-len300_n8_s0-v1.0.0" and source.splits == ("train", "validation")
    assert source.documents("train") == [r["text"] for r in copies.generate_split("train", 300, 8, 0)]
    mixed = resolve("longctx+copies", str(tmp_path), longctx_length=300, longctx_examples=8)
    train = mixed.documents("train")
    assert len(train) == 16 and train[8:] == source.documents("train")
    assert mixed.documents("validation") == mixed.parts[0].documents("validation")  # longctx's
    assert mixed.qa() == mixed.parts[0].qa()
    with pytest.raises(DataError, match="has no question split"):
        source.qa()


def test_too_short_a_document_is_refused(tmp_path):
    with pytest.raises(DataError, match="copies needs length >= 120.*longctx_length"):
        resolve("copies", str(tmp_path), longctx_length=100)
