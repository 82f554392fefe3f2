"""Resolve a dataset name (data.name) to documents per split, and questions for load_qa.

Names:
  pystdlib | facts | longctx   built-in TFDS builders, prepared on first use into
  | drills | copies            <data_dir>/tfds and read back with tfds data sources
                               (drills: longctx's retrieval drills alone; copies: random strings
                               written 2-4 times in a row; data.longctx_length characters per
                               document, data.longctx_examples documents).
  tfds:<name>                  an already-prepared TFDS dataset (array_record) in
                               <data_dir>/tfds or <data_dir>; field data.text_key.
  text:<glob>                  UTF-8 text files, one document each, local or remote (like parquet:).
  parquet:<glob> jsonl:<glob>  parquet or JSON-lines (.jsonl[.gz]) files, local or remote (gs://, via
                               etils.epath), text field data.text_key, read piece by piece
                               (edge_jax.data.file_sources).
  a+b[+c...]                   train = the train documents of every part, in order;
                               other splits (and questions) come from the parts that have them,
                               validation from the first part. Globs may not contain '+'
                               (they may contain '*'; a trailing *K with K digits is a repeat).
                               A part written name*K has its training text K times (up-weighting
                               a small corpus such as facts); it still asks its questions once.

`Source.key` is a filename-safe string that changes whenever the documents can change; token
and tokenizer caches are keyed by it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import hashlib
import itertools
import logging
import os
import re
from typing import Callable, Iterator

from edge_jax.data.errors import DataError
from edge_jax.data.file_sources import FORMATS as FILE_FORMATS
from edge_jax.data.file_sources import file_source
from edge_jax.data.pieces import Piece, record_cuts
from edge_jax.distributed import prepared

BUILTIN = ("pystdlib", "facts", "longctx", "drills", "copies")
WITH_QA = ("facts", "longctx")  # the built-ins with a question split
VALID_NAMES = ("pystdlib, facts, longctx, drills, copies, tfds:<name>, text:<glob>, parquet:<glob>, "
               "jsonl:<glob>, a+b (e.g. pystdlib+facts), a+b*K (b's training text K times)")
# Test-size switch: a positive value limits pystdlib to that many files (a separate config).
PYSTDLIB_MAX_FILES_ENV = "EDGE_JAX_PYSTDLIB_MAX_FILES"


def data_dir_default() -> str:
    """$EDGE_JAX_DATA if set, else ~/.cache/edge_jax."""
    return os.environ.get("EDGE_JAX_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "edge_jax")


def local_data_dir(path: str) -> str:
    """``path``, the data directory (``EDGE_JAX_DATA``, ``data.data_dir``), which must be on a local disk: the
    built-in and ``tfds:`` datasets are prepared there by TFDS, whose array_record writer opens local files
    only. A bucket's is a one-line DataError naming what goes in a bucket instead."""
    if "://" in str(path):
        raise DataError(f"the data directory {path} (EDGE_JAX_DATA or data.data_dir) cannot be in a bucket: TFDS "
                        "prepares the built-in datasets there with local files; keep it on a local disk (each host "
                        "prepares its own copy) and put corpora and token shards in the bucket instead "
                        "(data.name=parquet:gs://..., data.tokens_dir=gs://...)")
    return path


def _safe(text: str, limit: int = 100) -> str:
    out = re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)
    if len(out) > limit:
        out = out[:limit - 9] + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return out


@dataclasses.dataclass
class Source:
    """Documents of one dataset. ``reader(split)`` reads a split's documents piece by piece
    (:mod:`edge_jax.data.pieces`); ``load(split)`` streams its records (dicts with 'text' and, for
    question splits, 'prompt', 'answer', 'task') in the same fixed order."""

    name: str
    key: str
    splits: tuple[str, ...]
    load: Callable[[str], Iterator[dict]]
    qa_split: str | None = None
    parts: tuple["Source", ...] = ()
    reader: Callable[[str], object] | None = None

    def _check(self, split: str) -> None:
        if split not in self.splits:
            raise DataError(f"dataset '{self.name}' has no split '{split}' (it has "
                            f"{', '.join(self.splits)}); pass one of those")

    def iter_records(self, split: str) -> Iterator[dict]:
        self._check(split)
        return self.load(split)

    def records(self, split: str) -> list[dict]:
        return list(self.iter_records(split))

    def pieces(self, split: str, want: int = 1) -> list[Piece]:
        """The split cut into pieces (about ``want``, at least one per file), in document order. A
        mixture's train split is its parts' pieces in order (a part written name*K K times)."""
        self._check(split)
        if self.parts:
            parts = self.parts if split == "train" else self.parts[:1]
            return [p for part in parts for p in part.pieces(split, max(1, want // len(parts)))]
        return self.reader(split).pieces(want)

    def iter_documents(self, split: str) -> Iterator[str]:
        return (text for piece in self.pieces(split) for text in piece.texts())

    def documents(self, split: str) -> list[str]:
        return list(self.iter_documents(split))

    def qa(self) -> list[dict]:
        with_qa = list({p.key: p for p in self.parts if p.qa_split}.values())  # a repeated part asks once
        if with_qa:
            return [q for p in with_qa for q in p.qa()]
        if self.qa_split is None:
            raise DataError(f"dataset '{self.name}' has no question split; load_qa needs facts "
                            "or longctx (alone or in a combination such as pystdlib+facts)")
        return [{k: r[k] for k in ("prompt", "answer", "task")} for r in self.records(self.qa_split)]


@dataclasses.dataclass(frozen=True)
class RecordReader:
    """Reads the text field of a random-access record source (a prepared TFDS split), ``opener(*args)``
    opening it once per process; picklable."""

    opener: Callable
    args: tuple
    field: str = "text"

    def _source(self):
        return _opened(self.opener, self.args)

    def pieces(self, want: int) -> list[Piece]:
        return [Piece(self, 0, a, b) for a, b in record_cuts(len(self._source()), want)]

    def read(self, piece: Piece, position: int) -> Iterator[tuple[str, int]]:
        source = self._source()
        stop = len(source) if piece.stop < 0 else piece.stop
        for start in range(position, stop, 1024):
            for j, r in enumerate(source.__getitems__(list(range(start, min(stop, start + 1024))))):
                v = r[self.field]
                yield (v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)), start + j + 1


def _text_records(reader: Callable, split: str) -> Iterator[dict]:
    """``{"text": ...}`` of every document of a split, in order (``load`` of a source that has only text)."""
    return ({"text": text} for piece in reader(split).pieces(1) for text in piece.texts())


@functools.lru_cache(maxsize=None)
def _opened(opener: Callable, args: tuple):
    return opener(*args)


def _decode(record: dict, keys) -> dict:
    return {k: (v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v))
            for k, v in record.items() if k in keys}


def _read_split(data_source, keys=("text", "prompt", "answer", "task")) -> Iterator[dict]:
    n = len(data_source)
    for start in range(0, n, 1024):
        for r in data_source.__getitems__(list(range(start, min(n, start + 1024)))):
            yield _decode(r, keys)


@contextlib.contextmanager
def _quiet_tfds():
    """No progress bars and no absl warnings about our (dynamic) builder configs."""
    from tensorflow_datasets.core.utils import tqdm_utils

    absl_logger = logging.getLogger("absl")
    level, bars = absl_logger.level, tqdm_utils._active  # pylint: disable=protected-access
    absl_logger.setLevel(logging.ERROR)
    tqdm_utils.display_progress_bar(False)
    try:
        yield
    finally:
        absl_logger.setLevel(level)
        tqdm_utils.display_progress_bar(bars)


@functools.lru_cache(maxsize=None)
def _builder_config(kind: str, params: tuple):
    from edge_jax.data.builders import copies, facts, longctx_tfds, pystdlib

    return {"pystdlib": pystdlib.make_config, "facts": facts.make_config,
            "longctx": longctx_tfds.make_config,
            "drills": functools.partial(longctx_tfds.make_config, form="drills"),
            "copies": copies.make_config}[kind](*params)


def _prepared(cls, config, tfds_dir: str):
    """The builder, prepared (once per job: process 0 prepares, the others wait). tfds writes into an
    `incomplete.*` folder and renames it when done (removing it on failure), so an interrupted run
    leaves nothing that looks prepared. If another job finishes first, our rename fails and its
    result is used."""
    def make():
        return cls(config=config, data_dir=tfds_dir, file_format="array_record")

    def build() -> None:
        try:
            make().download_and_prepare()
        except OSError:
            if not make().is_prepared():
                raise

    prepared(f"tfds {config.name}", lambda: make().is_prepared(), build)
    return make()


def _builtin_split(kind: str, data_dir: str, params: tuple, split: str):
    """A built-in dataset's split as a TFDS data source, the builder prepared first."""
    from edge_jax.data.builders import BUILDERS

    with _quiet_tfds():
        builder = _prepared(BUILDERS[kind], _builder_config(kind, params), os.path.join(data_dir, "tfds"))
        return builder.as_data_source(split=split)


def _builtin(kind: str, data_dir: str, params: tuple) -> Source:
    from edge_jax.data.builders import BUILDERS

    try:
        config = _builder_config(kind, params)
    except ValueError as e:
        raise DataError(f"bad parameters for dataset '{kind}': {e}; change data.facts_entities / "
                        "data.longctx_length / data.longctx_examples") from None

    def reader(split: str) -> RecordReader:
        return RecordReader(_builtin_split, (kind, data_dir, params, split))

    def load(split: str) -> Iterator[dict]:
        return _read_split(_opened(_builtin_split, (kind, data_dir, params, split)))

    splits = ("train", "validation") + (("qa",) if kind in WITH_QA else ())
    key = _safe(f"{kind}-{config.name}-v{BUILDERS[kind].VERSION}")
    return Source(kind, key, splits, load, qa_split="qa" if kind in WITH_QA else None, reader=reader)


def _tfds_split(name: str, where: str, split: str):
    import tensorflow_datasets as tfds

    try:
        return tfds.data_source(name, split=split, data_dir=where, download=False)
    except NotImplementedError as e:
        raise DataError(f"TFDS dataset '{name}' cannot be read without TensorFlow ({e}); "
                        "rebuild it with --file_format=array_record") from None


def _tfds(name: str, data_dir: str, text_key: str) -> Source:
    import tensorflow_datasets as tfds

    tried = [os.path.join(data_dir, "tfds"), data_dir]
    builder = None
    for d in tried:
        try:
            b = tfds.builder(name, data_dir=d)
        except Exception:  # noqa: BLE001 - not registered and not on disk there
            continue
        if b.is_prepared():
            builder, where = b, d
            break
    if builder is None:
        base = name.split(":")[0].split("/")[0]
        found = sorted(f"{base}/{c}" for d in tried if os.path.isdir(os.path.join(d, base))
                       for c in os.listdir(os.path.join(d, base))
                       if not c[:1].isdigit() and not c.startswith("incomplete.")
                       and os.path.isdir(os.path.join(d, base, c)))
        if found:
            raise DataError(f"TFDS dataset '{name}' is not prepared in {' or '.join(tried)}, but "
                            f"these configs are: {', '.join(found)}; name one as tfds:<name/config>")
        raise DataError(f"TFDS dataset '{name}' is not prepared in {' or '.join(tried)}; prepare it "
                        f"where there is network with `tfds build {name} --data_dir={tried[0]} "
                        "--file_format=array_record` and copy it here, or choose another data.name")
    features = list(builder.info.features.keys()) if builder.info.features else []
    if text_key not in features:
        raise DataError(f"TFDS dataset '{name}' has no feature '{text_key}' (it has "
                        f"{', '.join(features)}); set data.text_key to the text feature")
    splits = tuple(sorted(builder.info.splits.keys()))

    def reader(split: str) -> RecordReader:
        return RecordReader(_tfds_split, (name, where, split), text_key)

    load = functools.partial(_text_records, reader)

    return Source(f"tfds:{name}", _safe(f"tfds-{name}-{builder.info.version}-{text_key}"),
                  splits, load, reader=reader)


def _files(kind: str, pattern: str, text_key: str) -> Source:
    key, reader = file_source(kind, pattern, text_key)

    load = functools.partial(_text_records, reader)

    return Source(f"{kind}:{pattern}", _safe(key), ("train", "validation"), load, reader=reader)


def _combined(parts: list[Source]) -> Source:
    first = parts[0]

    def load(split: str) -> Iterator[dict]:
        if split == "train":
            return itertools.chain.from_iterable(p.iter_records("train") for p in parts)
        return first.iter_records(split)

    return Source("+".join(p.name for p in parts), _safe("+".join(p.key for p in parts), 150),
                  first.splits, load, parts=tuple(parts))


def resolve(name: str, data_dir: str = "", *, text_key: str = "text", facts_entities: int = 2000,
            longctx_length: int = 4096, longctx_examples: int = 200) -> Source:
    """The Source for a data.name (see module docstring); DataError for unknown names."""
    data_dir = local_data_dir(data_dir or data_dir_default())
    name = (name or "").strip()
    if "+" in name:
        parts = []
        for item in name.split("+"):
            part, star, times = item.rpartition("*")
            if not star or (":" in item and not times.isdigit()):  # no repeat; a glob's own * stays
                part, times = item, ""
            elif not (times.isdigit() and int(times) > 0):
                raise DataError(f"bad repeat {item!r} in dataset '{name}'; write name*K with K a positive integer")
            source = resolve(part, data_dir, text_key=text_key, facts_entities=facts_entities,
                             longctx_length=longctx_length, longctx_examples=longctx_examples)
            parts += [source] * int(times or 1)
        return _combined(parts)
    if name == "pystdlib":
        return _builtin(name, data_dir, (int(os.environ.get(PYSTDLIB_MAX_FILES_ENV, "0") or 0),))
    if name == "facts":
        return _builtin(name, data_dir, (int(facts_entities),))
    if name in ("longctx", "drills", "copies"):
        return _builtin(name, data_dir, (int(longctx_length), int(longctx_examples)))
    if name.startswith("tfds:") and name[5:]:
        return _tfds(name[5:], data_dir, text_key)
    kind, _, pattern = name.partition(":")
    if kind in FILE_FORMATS and pattern:
        return _files(kind, pattern, text_key)
    close = difflib.get_close_matches(name, list(BUILTIN) + ["tfds:", "text:", "parquet:", "jsonl:"], n=1,
                                      cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise DataError(f"unknown dataset '{name}'; {hint}valid names: {VALID_NAMES}")


def resolve_cfg(data_cfg, data_dir: str = "") -> Source:
    """resolve() with the parameters of a data config (data_dir overrides data_cfg.data_dir)."""
    return resolve(data_cfg.name, data_dir or getattr(data_cfg, "data_dir", "") or "",
                   text_key=getattr(data_cfg, "text_key", "text") or "text",
                   facts_entities=getattr(data_cfg, "facts_entities", 2000),
                   longctx_length=getattr(data_cfg, "longctx_length", 4096),
                   longctx_examples=getattr(data_cfg, "longctx_examples", 200))


def load_qa(data_cfg, data_dir: str = "") -> list[dict]:
    """[{'prompt', 'answer', 'task'}] of the dataset's question split (facts: held-out questions;
    longctx: task prompts). A model answers by continuing `prompt` (which ends in 'Answer:');
    score exact match of the continuation, stripped, up to the first newline or eos."""
    return resolve_cfg(data_cfg, data_dir).qa()
