"""Bad data: unknown dataset names, missing or malformed files, wrong columns, text that is not UTF-8,
gzip files under the wrong name or truncated, missing tokenizers.

The file corpora are written under {tmp} by each row's setup; `train` reads them with
`--config.data.name=jsonl:<glob>` (or parquet:) and `data prepare` the same (into {tmp}/tok)."""
import gzip
import json

from harness import TINY_CONFIG, Case, train


def _jsonl(lines: list, name: str = "d/a.jsonl"):
    def setup(ctx):
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return setup


def _parquet(columns: dict, name: str = "p/a.parquet"):
    def setup(ctx):
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(columns), str(path))
    return setup


def _raw(name: str, make):
    """setup: {tmp}/``name`` holding ``make()``'s bytes."""
    def setup(ctx):
        path = ctx.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    return setup


def _lines(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)


def _random_bytes() -> bytes:
    import numpy as np
    return _lines({"text": TEXT}) + np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()


def _latin1() -> bytes:
    return _lines({"text": TEXT}, json.dumps({"text": "caf\u00e9 " + TEXT}, ensure_ascii=False).encode("latin-1"))


def _gzipped() -> bytes:
    return gzip.compress(_lines(*[{"text": TEXT}] * 8))


def _truncated_gzip() -> bytes:
    data = gzip.compress(_lines(*[{"text": TEXT + str(i)} for i in range(200)]))
    return data[:len(data) * 2 // 3]


def _not_utf8_parquet(ctx):
    """setup: {tmp}/p/a.parquet whose text column holds one value that is not UTF-8 (pyarrow checks
    UTF-8 when it builds a column from Python strings, not from buffers)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    values = [TEXT.encode()] * 3 + [b"caf\xe9"]
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    column = pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets.tobytes()),
                                                              pa.py_buffer(b"".join(values))])
    (ctx.tmp / "p").mkdir()
    pq.write_table(pa.table({"text": column}), str(ctx.tmp / "p" / "a.parquet"))


def _data(*pairs: str) -> list[str]:
    return train(*(f"--config.data.{p}" for p in pairs))


def _row(name, argv, says, **kw):
    """A data row of `train`: it may leave the new workdir's :data:`CLAIMED` files."""
    return Case(name, argv, says, changes=CLAIMED, **kw)


def _prepare(*pairs: str) -> list[str]:
    return ["data", "prepare", "--config", TINY_CONFIG, *(f"--config.data.{p}" for p in pairs)]


# A refusal by `train` in a new workdir may leave these two behind: the run claims the workdir (its config
# and tokenizer) before it reads the data; a rerun with the data fixed takes them over.
CLAIMED = ("run/config.json", "run/tokenizer.json")
TEXT = "def f(x):\n    return x + 1\n" * 20
REENCODE = "re-encode it as UTF-8"
PIECES = ("tok/*/[0-9]*.bin",)   # `data prepare` keeps the shards it finished before the bad record
NOT_UTF8 = {
    "random_bytes": (_random_bytes, ("a.jsonl line 2 is not UTF-8 text", REENCODE),
                     ("a.jsonl byte ", "is not UTF-8 text", REENCODE)),
    "latin1_line": (_latin1, ("a.jsonl line 2 is not UTF-8 text (byte 0xe9 at column 14", REENCODE),
                    ("is not UTF-8 text (byte 0xe9 at column 14", REENCODE)),
    "gzip_named_jsonl": (_gzipped, "a.jsonl is gzip-compressed, but its name does not end in .gz; rename it to "
                                   "a.jsonl.gz", "rename it to a.jsonl.gz"),
}
UNDECODABLE = [
    row for what, (make, says, says_prepare) in NOT_UTF8.items() for row in (
        _row(f"jsonl_{what}", _data("name=jsonl:{tmp}/d/*.jsonl"), says, setup=_raw("d/a.jsonl", make)),
        Case(f"jsonl_{what}_prepare", _prepare("name=jsonl:{tmp}/d/*.jsonl", "tokens_dir={tmp}/tok"), says_prepare,
             setup=_raw("d/a.jsonl", make), changes=PIECES))
] + [
    _row("jsonl_gz_truncated", _data("name=jsonl:{tmp}/d/*.jsonl.gz"),
         ("a.jsonl.gz is a truncated gzip file", "ends at byte ", "after line ", "download it again"),
         setup=_raw("d/a.jsonl.gz", _truncated_gzip)),
    Case("jsonl_gz_truncated_prepare", _prepare("name=jsonl:{tmp}/d/*.jsonl.gz", "tokens_dir={tmp}/tok"),
         ("a.jsonl.gz is a truncated gzip file", "download it again"), setup=_raw("d/a.jsonl.gz", _truncated_gzip)),
    _row("jsonl_gz_not_gzip", _data("name=jsonl:{tmp}/d/*.jsonl.gz"),
         "a.jsonl.gz is not gzip-compressed, but its name ends in .gz; rename it without .gz",
         setup=_raw("d/a.jsonl.gz", lambda: _lines({"text": TEXT}))),
    _row("text_latin1_line", _data("name=text:{tmp}/t/*.txt"), ("a.txt line 81 is not UTF-8 text", REENCODE),
         setup=_raw("t/a.txt", lambda: TEXT.encode() * 2 + "caf\u00e9\n".encode("latin-1") + TEXT.encode())),
    _row("parquet_text_not_utf8", _data("name=parquet:{tmp}/p/*.parquet"),
         ("a.parquet row 3 field 'text' is not UTF-8 text", "rewrite the column as UTF-8"),
         setup=_not_utf8_parquet),
    Case("parquet_text_not_utf8_prepare", _prepare("name=parquet:{tmp}/p/*.parquet", "tokens_dir={tmp}/tok"),
         "a.parquet row 3 field 'text' is not UTF-8 text", setup=_not_utf8_parquet, changes=PIECES),
]

def _prepared(damage):
    """setup: a JSONL corpus at {tmp}/d prepared into {tmp}/tok by `data prepare`, then ``damage(train split
    directory)`` done to its shards."""
    def setup(ctx):
        from edge_jax.cli import main
        _jsonl([{"text": TEXT + str(i)} for i in range(60)])(ctx)
        assert main([ctx.fill(a) for a in _prepare(*CORPUS)]) == 0
        damage(next((ctx.tmp / "tok").glob("*-train-*")))
    return setup


def _overwrite(split):
    """Every train shard overwritten with token id 60000 (the byte tokenizer has 258)."""
    import numpy as np
    for shard in sorted(split.glob("*.bin")):
        np.full(shard.stat().st_size // 2, 60000, "<u2").tofile(shard)


def _delete(split):
    (split / "00003.bin").unlink()


CORPUS = ("name=jsonl:{tmp}/d/*.jsonl", "tokens_dir={tmp}/tok")
REBUILD = "then run `edge-jax data prepare` with this run's --config flags to prepare it again"
SHARDS = [
    Case("shard_ids_outside_vocabulary", _data(*CORPUS), ("train-byte/00000.bin holds token id 60000",
                                                          "outside the vocabulary of 258 ids", REBUILD),
         setup=_prepared(_overwrite), changes=(*CLAIMED, "run/metrics.jsonl", "run/tb/*")),  # found in batch 1
    _row("shard_deleted", _data(*CORPUS), ("prepared shard ", "train-byte/00003.bin is missing",
                                           "train-byte/manifest.json", REBUILD), setup=_prepared(_delete)),
    Case("shard_deleted_prepare", _prepare(*CORPUS), ("train-byte/00003.bin is missing", REBUILD),
         setup=_prepared(_delete)),
]

CASES = [
    # dataset names
    _row("dataset_unknown", _data("name=pystdlb"), "unknown dataset 'pystdlb'; did you mean 'pystdlib'?"),
    _row("dataset_format_without_glob", _data("name=jsonl"), "did you mean 'jsonl:'"),
    _row("dataset_bad_repeat", _data("name=pystdlib*0+facts"), "bad repeat 'pystdlib*0'"),
    _row("dataset_tfds_not_prepared", _data("name=tfds:no_such_set"), "TFDS dataset 'no_such_set' is not prepared"),
    _row("dataset_remote_double_star", _data("name=parquet:gs://bucket/**/*.parquet"),
         "a remote glob cannot use **"),
    # file sources
    _row("jsonl_glob_matches_nothing", _data("name=jsonl:{tmp}/none/*.jsonl"), "matches no files"),
    _row("parquet_glob_matches_nothing", _data("name=parquet:{tmp}/none/*.parquet"), "matches no files"),
    _row("jsonl_line_not_json", _data("name=jsonl:{tmp}/d/*.jsonl"), "a.jsonl line 2 is not JSON",
         setup=_jsonl([{"text": TEXT}, "{broken", {"text": TEXT}])),
    _row("jsonl_line_is_a_list", _data("name=jsonl:{tmp}/d/*.jsonl"), "line 1 is a JSON list, not an object",
         setup=_jsonl([[1, 2]])),
    _row("jsonl_wrong_field", _data("name=jsonl:{tmp}/d/*.jsonl"), "line 1 has no field 'text' (it has body)",
         setup=_jsonl([{"body": TEXT}])),
    _row("jsonl_text_key_not_text", _data("name=jsonl:{tmp}/d/*.jsonl", "text_key=n"), "field 'n' is a int, not text",
         setup=_jsonl([{"text": TEXT, "n": 3}])),
    _row("parquet_wrong_columns", _data("name=parquet:{tmp}/p/*.parquet"),
         "has no field 'text' (it has content, id); set data.text_key",
         setup=_parquet({"content": [TEXT] * 4, "id": [0, 1, 2, 3]})),
    _row("parquet_text_key_not_text", _data("name=parquet:{tmp}/p/*.parquet", "text_key=id"),
         "field 'id' is a int, not text", setup=_parquet({"text": [TEXT] * 4, "id": [0, 1, 2, 3]})),
    Case("prepare_dataset_unknown", _prepare("name=pystdlb"), "did you mean 'pystdlib'?"),
    # tokenizers
    Case("tokenizer_file_missing", _data("tokenizer=spm_file:{tmp}/nope.model"), "nope.model"),
    Case("tokenizer_hf_file_missing", _data("tokenizer=hf:{tmp}/tokenizer.json"), "file not found"),
    Case("tokenizer_spec_unknown", _data("tokenizer=bpe"), "unknown tokenizer spec 'bpe'"),
    Case("tokenizer_spm_vocab_too_small", _data("tokenizer=spm:100"), "bad tokenizer spec 'spm:100'"),
    *UNDECODABLE,
    *SHARDS,
]
