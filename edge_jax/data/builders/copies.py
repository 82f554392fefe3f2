"""`edge_copies`: random strings written several times in a row, a dense copying corpus.

Every train and validation document is exactly `length` characters of lines, each one random string
(`ALPHABET`, `MIN_CHARS` to `MAX_CHARS` characters) written 2 to `MAX_REPEATS` times separated by
spaces; the last line is cut at `length`. Every repeat after a string's first is predictable only by
copying from earlier in the window, so a small model forms induction heads on them (attend to where
the current text occurred before and copy what followed). Mixed into a corpus with too few copyable
tokens for that to happen (`longctx+copies`, for instance; docs/data.md), it lets in-context retrieval
be learned.

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
MIN_CHARS, MAX_CHARS = 8, 60
MAX_REPEATS = 4


def make_document(rng: random.Random, length: int) -> str:
    """One document of exactly `length` characters (see module docstring)."""
    lines: list[str] = []
    size = -1  # of "\n".join(lines)
    while size < length:
        word = "".join(rng.choices(ALPHABET, k=rng.randint(MIN_CHARS, MAX_CHARS)))
        lines.append(" ".join([word] * rng.randint(2, MAX_REPEATS)))
        size += len(lines[-1]) + 1
    return "\n".join(lines)[:length]


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
    if length < 2 * MAX_CHARS or examples < 1:
        raise ValueError(f"copies needs length >= {2 * MAX_CHARS} and examples >= 1, got {length}, {examples}")
    return CopiesConfig(name=f"len{length}_n{examples}_s{seed}", length=length, examples=examples, seed=seed,
                        description=f"{examples} documents of {length} characters of repeated strings, seed {seed}")


class EdgeCopies(tfds.core.GeneratorBasedBuilder):
    """Random strings written several times in a row (see module docstring)."""

    name = "edge_copies"
    VERSION = tfds.core.Version("1.2.0")
    RELEASE_NOTES: ClassVar[dict[str, str]] = {
        "1.0.0": "First release: lines of one string written 2-4 times.",
        "1.1.0": "Strings recur at random distances (any earlier string of the document), 8-24 characters.",
        "1.2.0": "1.0.0's lines again: 1.1.0's distant recurrences started no copying in a 3,000-step base.",
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
