"""Bad data: unknown dataset names, missing or malformed files, wrong columns, missing tokenizers.

The file corpora are written under {tmp} by each row's setup; `train` reads them with
`--config.data.name=jsonl:<glob>` (or parquet:) and `data prepare` the same."""
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
]
