"""`edge_copies`: documents of random strings written several times in a row, and the `copies` dataset name."""
import random

import pytest

from edge_jax.data import DataError, resolve
from edge_jax.data.builders import copies


def check_copies(doc: str, length: int) -> None:
    """Exactly `length` characters of lines, each one string of the alphabet written 2-MAX_REPEATS times."""
    assert len(doc) == length
    lines = doc.split("\n")
    for i, line in enumerate(lines):
        words = line.split(" ")
        assert all(set(w) <= set(copies.ALPHABET) for w in words)
        if i < len(lines) - 1:  # the last line may be cut anywhere, even after a space
            assert 2 <= len(words) <= copies.MAX_REPEATS and len(set(words)) == 1
            assert copies.MIN_CHARS <= len(words[0]) <= copies.MAX_CHARS
        else:
            assert all(words[0].startswith(w) for w in words[1:])


@pytest.mark.parametrize("length", [120, 511, 2000])
def test_documents_have_the_length_and_strings_repeat(length):
    rng = random.Random(3)
    docs = [copies.make_document(rng, length) for _ in range(40)]
    for doc in docs:
        check_copies(doc, length)
    words = [w for doc in docs for line in doc.split("\n")[:-1] for w in line.split(" ")]
    assert len(set(words)) < len(words) / 2  # every string at least twice
    assert len({doc.split(" ")[0] for doc in docs}) == len(docs)  # new strings in every document


def test_splits_are_pure_and_distinct():
    a = copies.generate_split("train", 300, 20, 0)
    assert a == copies.generate_split("train", 300, 20, 0)
    assert a != copies.generate_split("train", 300, 20, 1)
    val = copies.generate_split("validation", 300, 20, 0)
    assert len(a) == 20 and len(val) == 3 and not {r["text"] for r in a} & {r["text"] for r in val}


def test_builder_prepares_and_mixes_with_longctx(tmp_path):
    source = resolve("copies", str(tmp_path), longctx_length=300, longctx_examples=8)
    assert source.key == "copies-len300_n8_s0-v1.2.0" and source.splits == ("train", "validation")
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
