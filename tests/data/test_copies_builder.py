"""`edge_copies`: documents of repeated random strings, and the `copies` dataset name."""
import random

import pytest

from edge_jax.data import DataError, resolve
from edge_jax.data.builders import copies


def check_copies(doc: str, length: int) -> list[int]:
    """Exactly `length` characters of strings of the alphabet; returns, for every string that recurs,
    how many strings back it stood before."""
    assert len(doc) == length
    words = doc.replace("\n", " ").split(" ")
    whole = words[:-1]  # the last one may be cut (or empty, when the cut falls after a separator)
    assert all(w and set(w) <= set(copies.ALPHABET) for w in whole) and set(words[-1]) <= set(copies.ALPHABET)
    assert all(copies.MIN_CHARS <= len(w) <= copies.MAX_CHARS for w in whole)
    last: dict[str, int] = {}
    back = []
    for i, w in enumerate(whole):
        if w in last:
            back.append(i - last[w])
        last[w] = i
    return back


@pytest.mark.parametrize("length", [96, 511, 2000])
def test_documents_have_the_length_and_strings_recur(length):
    rng = random.Random(3)
    docs = [copies.make_document(rng, length) for _ in range(40)]
    backs = [check_copies(doc, length) for doc in docs]
    recurring = sum(len(b) for b in backs)
    total = sum(len(doc.split()) for doc in docs)  # the same documents' strings
    assert 0.3 < recurring / total < 0.6  # about REPEAT of the strings recur
    if length >= 511:  # distances spread over the document, not only to the string just before
        distances = [d for b in backs for d in b]
        assert max(distances) >= 10 and sum(d > 3 for d in distances) > len(distances) / 3


def test_splits_are_pure_and_distinct():
    a = copies.generate_split("train", 300, 20, 0)
    assert a == copies.generate_split("train", 300, 20, 0)
    assert a != copies.generate_split("train", 300, 20, 1)
    val = copies.generate_split("validation", 300, 20, 0)
    assert len(a) == 20 and len(val) == 3 and not {r["text"] for r in a} & {r["text"] for r in val}


def test_builder_prepares_and_mixes_with_longctx(tmp_path):
    source = resolve("copies", str(tmp_path), longctx_length=300, longctx_examples=8)
    assert source.key == "copies-len300_n8_s0-v1.1.0" and source.splits == ("train", "validation")
    assert source.documents("train") == [r["text"] for r in copies.generate_split("train", 300, 8, 0)]
    mixed = resolve("longctx+copies", str(tmp_path), longctx_length=300, longctx_examples=8)
    train = mixed.documents("train")
    assert len(train) == 16 and train[8:] == source.documents("train")
    assert mixed.documents("validation") == mixed.parts[0].documents("validation")  # longctx's
    assert mixed.qa() == mixed.parts[0].qa()
    with pytest.raises(DataError, match="has no question split"):
        source.qa()


def test_too_short_a_document_is_refused(tmp_path):
    with pytest.raises(DataError, match="copies needs length >= 96.*longctx_length"):
        resolve("copies", str(tmp_path), longctx_length=90)
