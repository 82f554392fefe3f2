"""``parquet:<glob>``, ``jsonl:<glob>`` and ``text:<glob>``: pretraining text in the formats corpora are
published in (FineWeb-Edu, for one, is parquet), local or remote, read piece by piece.

Paths go through ``etils.epath``, so ``gs://bucket/fineweb/data/*/*.parquet`` works as well as a local
glob (``~`` expanded; ``**`` recursive locally; remote globs take ``*`` per level, since epath refuses
``**`` there). Nothing is held whole: parquet is read a record batch of one column at a time
(``ParquetFile.iter_batches``), JSONL (optionally ``.gz``) a line at a time, a text file is one
document.

A split is a list of :class:`~edge_jax.data.pieces.Piece`: a whole file, or, when a reader asks for
more pieces than there are files, a run of parquet row groups or a byte range of a plain JSONL file
(a line belongs to the range its first byte lies in). A position inside a piece is a row of the file
(parquet), a byte offset (JSONL; decompressed bytes for ``.gz``) or 0 (text), so a reader can start
again from any document it has reached.

Splits: ~2% of the files (by a hash of their relative path) are validation when that leaves both splits
non-empty; otherwise ~2% of the records of every file are (by a hash of the file and the record's
row or byte offset), and for text files the last ~2% of every file. ``file_source``'s key hashes every
file's relative path, size and modification time, and the text field, so token caches follow the files.

Text must be UTF-8: a line (JSONL), row (parquet) or file (text) that is not, a gzip file under a plain
name, a ``.gz`` file that is not gzip, and a truncated or damaged gzip stream are each a one-line
DataError naming the file, the line (or row, or byte offset) and the fix.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
import hashlib
import json
import os
import zlib
from typing import Callable, Iterator

from edge_jax.data.errors import DataError
from edge_jax.data.pieces import Piece, split_counts
from edge_jax.errors import one_line
from edge_jax.utils.storage import epath

FORMATS = ("parquet", "jsonl", "text")
PARQUET_BATCH = 1024
VALIDATION_PER_MILLE = 20  # the share of files (or records) that are validation


def _glob(pattern: str) -> list:
    """Files matching ``pattern`` (``**`` recursive), sorted."""
    if "://" not in pattern:
        import glob as globlib
        return sorted(epath(p) for p in globlib.glob(os.path.expanduser(pattern), recursive=True)
                      if os.path.isfile(p))
    if "**" in pattern:
        raise DataError(f"'{pattern}': a remote glob cannot use **; write one * per directory level "
                        "(gs://bucket/data/*/*.parquet)")
    root, parts = pattern.split("://", 1)[0] + "://", pattern.split("://", 1)[1].split("/")
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    base = epath(root + "/".join(parts[:fixed]))
    if fixed == len(parts):
        return [base] if base.is_file() else []
    return sorted(p for p in base.glob("/".join(parts[fixed:])) if p.is_file())


def hashed_in(text: str) -> bool:
    """Whether ``text`` (a file's relative path, or a file and record) falls in the validation share."""
    return int(hashlib.sha1(text.encode()).hexdigest()[:8], 16) % 1000 < VALIDATION_PER_MILLE


def _text(value, where: str, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{key}' is a {type(value).__name__}, not text; set data.text_key "
                        "to a string field")
    return value


UTF8_FIX = "re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8 old > new)"
GZIP_MAGIC = b"\x1f\x8b"


class NotUTF8(DataError):
    """Text that is not UTF-8 (a one-line message naming where it is and the fix)."""


def not_utf8(where: str, e: UnicodeDecodeError, fix: str = UTF8_FIX, line_start: int = 0) -> NotUTF8:
    """The one-line error for the undecodable text ``e`` found at ``where`` (its line starting at byte
    ``line_start`` of what was decoded)."""
    return NotUTF8(f"{where} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at column {e.start - line_start + 1}: "
                   f"{e.reason}); {fix}")


def utf8(data: bytes | str, where: str) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped); a one-line NotUTF8 naming ``where``."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise not_utf8(where, e) from None


def jsonl_record(line: bytes | str, where: str) -> dict:
    """One JSON-lines line as an object; a one-line DataError naming ``where`` when it is not one."""
    try:
        record = json.loads(utf8(line, where))
    except json.JSONDecodeError as e:
        raise DataError(f"{where} is not JSON ({e.msg}); each line must be one JSON object") from None
    if not isinstance(record, dict):
        raise DataError(f"{where} is a JSON {type(record).__name__}, not an object; each line "
                        "must be one JSON object")
    return record


def jsonl_records(lines, where: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON-lines text stream."""
    for i, line in enumerate(lines, 1):
        if line.strip():
            yield i, jsonl_record(line, f"{where} line {i}")


def is_gzip(path: str) -> bool:
    """Whether the file ``path`` starts with gzip's magic bytes."""
    with epath(path).open("rb") as f:
        return f.read(2) == GZIP_MAGIC


def gzip_named_plain(path: str, name: str) -> DataError | None:
    """The error for a gzip file under a plain name (``name``: how messages call it), else None."""
    if path.endswith(".gz") or not is_gzip(path):
        return None
    return DataError(f"{name} is gzip-compressed, but its name does not end in .gz; rename it to "
                     f"{os.path.basename(path)}.gz (or gunzip it)")


def lines_of(f, raw, name: str, line: int | None = 0) -> Iterator[bytes]:
    """The lines of the binary file ``f`` (a ``gzip.GzipFile`` over ``raw``, or ``raw`` itself). A gzip
    stream that is truncated or damaged, or a .gz file that is not gzip, is a one-line DataError naming
    ``name``, the byte of the compressed file where it broke and the last whole line read (``line``:
    the line number before the first line read, None when not known)."""
    while True:
        try:
            text = f.readline()
        except (EOFError, OSError, zlib.error) as e:
            if f is raw:
                raise
            raise gzip_error(f, raw, name, line, e) from None
        if not text:
            return
        line = None if line is None else line + 1
        yield text


def gzip_error(f, raw, name: str, line: int | None, e: BaseException) -> DataError:
    raw.seek(0)
    if raw.read(2) != GZIP_MAGIC:
        return DataError(f"{name} is not gzip-compressed, but its name ends in .gz; rename it without .gz")
    at = raw.seek(0, os.SEEK_END)
    after = f"after line {line}" if line is not None else "mid-file"
    if isinstance(e, EOFError):
        return DataError(f"{name} is a truncated gzip file: its compressed data ends at byte {at} before the "
                         f"end-of-stream marker ({after}); download it again or recompress the whole file "
                         "(`gzip -t` checks one)")
    return DataError(f"{name} is a damaged gzip file ({one_line(e)}; {after}, file size {at} bytes); "
                     "download it again (`gzip -t` checks one)")


def arrow_pylist(data, where: Callable[[int], str]) -> list:
    """``data.to_pylist()`` of an arrow array or table; a one-line NotUTF8 naming ``where(row)`` of the
    first value whose text is not UTF-8 (pyarrow checks UTF-8 when it writes, not when it reads)."""
    try:
        return data.to_pylist()
    except UnicodeDecodeError as e:
        first = e
    for i in range(len(data)):
        try:
            data.slice(i, 1).to_pylist()
        except UnicodeDecodeError as e:
            first, row = e, i
            break
    else:
        row = 0
    raise not_utf8(where(row), first, "rewrite the column as UTF-8 text") from None


def parquet_file(f, path: str):
    """``pyarrow.parquet.ParquetFile`` of the open file ``f``; a one-line DataError naming ``path`` when
    it is not parquet (a truncated download, another format under a .parquet name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(f)
    except pa.ArrowException as e:
        raise DataError(f"{path} is not a parquet file ({one_line(e)}); download it again, or delete it or "
                        "narrow the glob so it is not read") from None


@dataclasses.dataclass(frozen=True)
class FileReader:
    """Reads the documents of one split of a list of files (picklable: it holds names, not handles)."""

    kind: str                  # parquet | jsonl | text
    paths: tuple[str, ...]
    rels: tuple[str, ...]      # paths relative to the glob's root: split and hash keys
    sizes: tuple[int, ...]
    text_key: str
    split: str                 # train | validation
    by_file: bool              # the split is a set of files (else records / a file's tail)

    def files(self) -> list[int]:
        want_val = self.split == "validation"
        return [i for i, rel in enumerate(self.rels) if not self.by_file or hashed_in(rel) == want_val]

    def pieces(self, want: int) -> list[Piece]:
        """The split's files in order, each cut into pieces in proportion to its size when there are
        fewer than ``want`` files (parquet by row groups, plain JSONL by bytes; others whole)."""
        files = self.files()
        counts = split_counts([self.sizes[i] for i in files], want)
        out = []
        for i, n in zip(files, counts):
            out += [Piece(self, i, a, b) for a, b in self._cuts(i, n)]
        return out

    def _cuts(self, i: int, n: int) -> list[tuple[int, int]]:
        if n <= 1 or self.kind == "text" or self.paths[i].endswith(".gz"):
            return [(0, -1)]
        if self.kind == "jsonl":
            size = self.sizes[i]
            edges = [size * j // n for j in range(n + 1)]
            return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]
        rows = self._row_groups(i)
        edges = [0] + [sum(rows[:len(rows) * j // n]) for j in range(1, n)] + [sum(rows)]
        return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]

    def _row_groups(self, i: int) -> list[int]:
        with epath(self.paths[i]).open("rb") as f:
            meta = parquet_file(f, self.paths[i]).metadata
            return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]

    def read(self, piece: Piece, position: int) -> Iterator[tuple[str, int]]:
        read = {"parquet": self._parquet, "jsonl": self._jsonl, "text": self._textfile}[self.kind]
        return read(piece, position)

    def _keep(self, rel: str, at: int) -> bool:
        return self.by_file or hashed_in(f"{rel}:{at}") == (self.split == "validation")

    def _parquet(self, piece: Piece, row: int) -> Iterator[tuple[str, int]]:
        rel, key = self.rels[piece.unit], self.text_key
        with epath(self.paths[piece.unit]).open("rb") as f:
            pf = parquet_file(f, self.paths[piece.unit])
            names = pf.schema_arrow.names
            if key not in names:
                raise DataError(f"{rel} has no field '{key}' (it has {', '.join(names)}); set data.text_key")
            stop = pf.metadata.num_rows if piece.stop < 0 else piece.stop
            groups, first, at = [], 0, 0
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if at + n > row and at < stop:
                    groups.append(g)
                    first = first if len(groups) > 1 else at
                at += n
            if not groups:
                return
            at = first
            for group in groups:   # one row group at a time: a reader holds one group's column, not a piece's
                for batch in pf.iter_batches(batch_size=PARQUET_BATCH, columns=[key], row_groups=[group]):
                    values = arrow_pylist(batch.column(0), lambda i, at=at: f"{rel} row {at + i} field '{key}'")
                    for value in values:
                        if row <= at < stop:
                            text = _text(value, f"{rel} row {at}", key)
                            if text and self._keep(rel, at):
                                yield text, at + 1
                        at += 1
                    if at >= stop:
                        return

    def _jsonl(self, piece: Piece, offset: int) -> Iterator[tuple[str, int]]:
        rel, key, path = self.rels[piece.unit], self.text_key, self.paths[piece.unit]
        with epath(path).open("rb") as raw:
            f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
            line_no = 0 if offset == 0 else None     # line numbers are known when reading from the start
            try:
                if offset == piece.start and offset > 0:
                    f.seek(offset - 1)
                    f.readline()                      # the line that began in the previous piece
                else:
                    f.seek(offset)
            except (EOFError, OSError, zlib.error) as e:
                if f is raw:
                    raise
                raise gzip_error(f, raw, rel, None, e) from None
            at = f.tell()
            for line in lines_of(f, raw, rel, line_no):
                if piece.stop >= 0 and at >= piece.stop:
                    return
                line_no = None if line_no is None else line_no + 1
                nxt = at + len(line)
                if line.strip():
                    where = f"{rel} line {line_no}" if line_no else f"{rel} byte {at}"
                    try:
                        record = jsonl_record(line, where)
                    except NotUTF8 as e:
                        raise gzip_named_plain(path, rel) or e from None
                    if key not in record:
                        raise DataError(f"{where} has no field '{key}' (it has {', '.join(sorted(record))}); "
                                        "set data.text_key")
                    text = _text(record[key], where, key)
                    if text and self._keep(rel, at):
                        yield text, nxt
                at = nxt

    def _textfile(self, piece: Piece, position: int) -> Iterator[tuple[str, int]]:
        if position > 0:
            return
        rel, path = self.rels[piece.unit], self.paths[piece.unit]
        with epath(path).open("rb") as f:
            data = f.read()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            line, start = data.count(b"\n", 0, e.start) + 1, data.rfind(b"\n", 0, e.start) + 1
            raise gzip_named_plain(path, rel) or not_utf8(f"{rel} line {line}", e, line_start=start) from None
        if not self.by_file:  # too few files to split by file: the last ~2% of each file
            cut = len(text) - len(text) * VALIDATION_PER_MILLE // 1000
            cut = text.rfind("\n", 0, cut) + 1 or cut  # from a line start where there is one
            text = text[:cut] if self.split == "train" else text[cut:]
        if text:
            yield text, 1


def file_source(kind: str, pattern: str, text_key: str):
    """``(key, reader)`` of the ``kind`` files matching ``pattern``: ``reader(split)`` is the
    split's :class:`FileReader`. A DataError when nothing matches."""
    paths = _glob(pattern)
    if not paths:
        ext = {"parquet": "parquet", "jsonl": "jsonl", "text": "txt"}[kind]
        raise DataError(f"{kind} glob '{pattern}' matches no files; pass an existing path or pattern such as "
                        f"{kind}:/data/corpus/**/*.{ext}")
    names = [str(p) for p in paths]
    root = os.path.commonpath(names) if "://" not in names[0] else names[0].rsplit("/", 1)[0]
    root = root if len(paths) > 1 else names[0].rsplit("/", 1)[0]
    rels = tuple(n[len(root):].lstrip("/") for n in names)
    with concurrent.futures.ThreadPoolExecutor(32 if "://" in names[0] else 1) as pool:
        stats = list(pool.map(lambda p: p.stat(), paths))   # remote: thousands of files in seconds
    sizes = tuple(int(s.length) for s in stats)
    empty = [n for n, size in zip(names, sizes) if size == 0]
    if kind == "parquet" and empty:  # no parquet file is 0 bytes (it ends in a footer)
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise DataError(f"{empty[0]}{more} is empty (0 bytes), not a parquet file; download it again, or delete "
                        "it or narrow the glob so it is not read")
    ident = [(r, n, s.mtime) for r, n, s in zip(rels, sizes, stats)]
    key = f"{kind}-" + hashlib.sha1(repr((ident, text_key) if kind != "text" else ident).encode()).hexdigest()[:12]
    by_file = any(hashed_in(r) for r in rels) and not all(hashed_in(r) for r in rels)

    def reader(split: str) -> FileReader:
        return FileReader(kind, tuple(names), rels, sizes, text_key, split, by_file)

    return key, reader
