"""`edge_copies`: random strings that recur at random distances, a dense copying corpus.

Every train and validation document is exactly `length` characters: random strings (`ALPHABET`,
`MIN_CHARS` to `MAX_CHARS` characters) separated by single spaces or newlines; each next string is,
with probability `REPEAT`, one already written in the document (drawn uniformly from those, so the
distance back to it ranges over the whole document), else a new one. The last string is cut at
`length`. The characters of a recurring string after its first are predictable only by finding where
it stood before and copying what followed, at any distance: the induction head retrieval needs.
Mixed into a corpus with too few copyable tokens for one to form (`longctx+copies`: the EdgeInfinite
tiny base, docs/edgeinfinite.md), it makes in-context retrieval learnable.

Splits: train (`examples` documents) and validation (max(3, examples // 10)), each with its own
random stream; everything is a pure function of (length, examples, seed).
"""
from __future__ import annotations

import dataclasses
import random
import string
from typing import ClassVar

import tensorflow_datasets as tfds

ALPHABET = string.ascii_lowercase + string.digits
MIN_CHARS, MAX_CHARS = 8, 24
REPEAT = 0.5  # the chance that the next string is one already written
NEWLINE = 0.2  # the chance that a separator is a newline (else a space)


def make_document(rng: random.Random, length: int) -> str:
    """One document of exactly `length` characters (see module docstring)."""
    written: list[str] = []
    parts: list[str] = []
    size = 0
    while size < length:
        if written and rng.random() < REPEAT:
            word = rng.choice(written)
        else:
            word = "".join(rng.choices(ALPHABET, k=rng.randint(MIN_CHARS, MAX_CHARS)))
            written.append(word)
        parts += [word, "\n" if rng.random() < NEWLINE else " "]
        size += len(word) + 1
    return "".join(parts)[:length]


def split_sizes(examples: int) -> dict[str, int]:
    return {"train": examples, "validation": max(3, examples // 10)}


def generate_split(split: str, length: int, examples: int, seed: int) -> list[dict]:
    rng = random.Random(f"edge_copies:{seed}:{length}:{split}")
    return [{"text": make_document(rng, length)} for _ in range(split_sizes(examples)[split])]


@dataclasses.dataclass
class CopiesConfig(tfds.core.BuilderConfig):
    length: int = 4096
    examples: int = 200
    seed: int = 0


def make_config(length: int = 4096, examples: int = 200, seed: int = 0) -> CopiesConfig:
    if length < 4 * MAX_CHARS or examples < 1:
        raise ValueError(f"copies needs length >= {4 * MAX_CHARS} and examples >= 1, got {length}, {examples}")
    return CopiesConfig(name=f"len{length}_n{examples}_s{seed}", length=length, examples=examples, seed=seed,
                        description=f"{examples} documents of {length} characters of recurring strings, seed {seed}")


class EdgeCopies(tfds.core.GeneratorBasedBuilder):
    """Random strings recurring at random distances (see module docstring)."""

    name = "edge_copies"
    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {
        "1.0.0": "First release: lines of one string written 2-4 times.",
        "1.1.0": "Strings recur at random distances (any earlier string of the document), 8-24 characters.",
    }

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, description=__doc__,
                                     features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
                                     disable_shuffling=True)

    def _split_generators(self, dl_manager):
        del dl_manager
        return {split: self._generate_examples(split) for split in split_sizes(self.builder_config.examples)}

    def _generate_examples(self, split):
        c = self.builder_config
        for i, record in enumerate(generate_split(split, c.length, c.examples, c.seed)):
            yield i, record
