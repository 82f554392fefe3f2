"""``edge-jax hf import SRC --workdir W``: an HF checkpoint directory as an edge_jax workdir.

W gets ``config.json`` (the full edge_jax config: the family's ``model.*`` keys, the tokenizer),
``tokenizer.json`` (the tokenizer record every run checks), ``hf/`` (the checkpoint's own
``config.json`` and tokenizer files, which export writes back), ``hf_source.json`` (where it came from)
and ``checkpoints/0`` holding the params only. Everything is checked first (config, names, shapes,
dtypes, file lengths), then tensors are read and written one at a time
(:mod:`edge_jax.hf.lazy_save`), into a temporary directory renamed to W at the end: a failed import
leaves nothing behind. In a bucket (``gs://``, no rename) the files are written locally and uploaded at the
end, ``config.json`` last, and the checkpoint is committed in place: a failed import leaves at most a prefix
without ``config.json``, which no reader takes for a workdir.

The params keep the checkpoint's dtype (bfloat16 stays bfloat16, bit for bit; float16 is widened to
float32, exactly). Without tokenizer files the model reads the built-in data with the byte tokenizer,
if its vocabulary has room for it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Iterator

import ml_collections
import numpy as np

from edge_jax.config import base_config, flatten, unflatten
from edge_jax.errors import UserError
from edge_jax.hf import memory_tables
from edge_jax.interop.convert import check_names, import_tensor, model_config_from_hf
from edge_jax.interop.family import Unsupported
from edge_jax.interop.safetensors_io import Checkpoint
from edge_jax.utils.args import new_output_dir
from edge_jax.utils.atomic import atomic_dir, copy_tree_atomic, write_json_atomic
from edge_jax.utils.storage import is_remote

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "generation_config.json", "vocab.json", "merges.txt", "added_tokens.json")
SOURCE = "hf_source.json"
HF_DIR = "hf"
BYTE_VOCAB = 258  # edge_jax.data.tokenizers.ByteTokenizer


def resolve_source(src: str) -> str:
    """A local checkpoint directory, or a hub id downloaded where the network allows."""
    path = os.path.expanduser(src)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise UserError(f"{src} is a file; pass the checkpoint's directory (config.json and *.safetensors)")
    if src.count("/") != 1 or src.startswith((".", "/", "~")):
        raise UserError(f"{src}: no such directory; pass a local HF checkpoint directory or a hub id (org/name)")
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(src, allow_patterns=["*.json", "*.safetensors", "tokenizer.model", "*.txt"])
    except ImportError as e:
        raise UserError(f"{src} is not a local directory and huggingface_hub is not installed: download it "
                        "first, or pip install -e '.[interop]'") from e
    except Exception as e:  # noqa: BLE001 - no network, no such repo, gated: the same fix
        raise UserError(f"cannot download {src} from the hub ({type(e).__name__}); download the checkpoint "
                        "directory elsewhere and pass its path") from e


def read_hf_config(directory: str) -> dict:
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        raise UserError(f"{directory} has no config.json; pass an HF checkpoint directory (config.json and "
                        "*.safetensors)")
    with open(path) as f:
        return json.load(f)


def param_dtype(ckpt: Checkpoint, names: list[str]) -> str:
    """bfloat16 for a bfloat16 checkpoint, else float32 (exact for float16 and float32)."""
    kinds = {ckpt.dtype(n).name for n in names}
    if kinds - {"bfloat16", "float16", "float32"}:
        raise Unsupported(f"floating weights expected, found {', '.join(sorted(kinds))}")
    return "bfloat16" if kinds == {"bfloat16"} else "float32"


def tokenizer_spec(directory: str, final: str, vocab_size: int) -> tuple[str, str | None]:
    """``(data.tokenizer, note)``: the checkpoint's own tokenizer (copied to W/hf/), else the byte one."""
    if os.path.exists(os.path.join(directory, "tokenizer.json")):
        return f"hf:{os.path.join(final, HF_DIR, 'tokenizer.json')}", None
    if os.path.exists(os.path.join(directory, "tokenizer.model")):
        return f"spm_file:{os.path.join(final, HF_DIR, 'tokenizer.model')}", None
    if vocab_size < BYTE_VOCAB:
        raise UserError(f"{directory} has no tokenizer files and its vocabulary ({vocab_size}) is too small for "
                        f"the byte tokenizer ({BYTE_VOCAB}); add tokenizer.json to the directory")
    return "byte", (f"note: {directory} has no tokenizer files; the model reads the built-in data with the byte "
                    "tokenizer (ids 0-257)")


def edge_config(cfg, tokenizer: str) -> ml_collections.ConfigDict:
    """The workdir's edge_jax config: the defaults, the imported model's keys and its tokenizer."""
    config = base_config()
    config.model.update({k: v for k, v in cfg.as_keys().items() if k in config.model})
    config.data.tokenizer = tokenizer
    return config


def plan(src: str):
    """Everything checked, nothing written: ``(directory, family name, cfg, entries, ckpt, hf_config)``."""
    directory = resolve_source(src)
    hf_config = read_hf_config(directory)
    ckpt = Checkpoint(directory)
    name, fam, cfg = model_config_from_hf(hf_config)
    memory = memory_tables.read(directory)
    if memory:  # an edge_jax export with a memory's tables: the model that was exported
        keys, tables = memory
        ckpt.entries.update(tables.entries)
        cfg = with_memory(cfg, keys)
    entries = fam.tensors(cfg) + (memory_entries(tables) if memory else [])
    check_names(entries, ckpt.names(), cfg)
    for t in entries:
        for n in t.hf:
            if ckpt.shape(n) != t.hf_shape:
                raise Unsupported(f"tensor {n!r} has shape {list(ckpt.shape(n))}, config.json implies "
                                  f"{list(t.hf_shape)}")
    dtype = param_dtype(ckpt, [n for t in entries for n in t.hf])
    cfg = dataclasses.replace(cfg, dtype=dtype, param_dtype=dtype)
    return directory, name, cfg, fam.tensors(cfg) + (memory_entries(tables) if memory else []), ckpt, hf_config


def with_memory(cfg, keys: dict):
    """``cfg`` with the memory keys an export recorded (the family gave the decoder's)."""
    own = {k: tuple(v) if isinstance(v, list) else v for k, v in keys.items()
           if k in cfg.as_keys() and k not in ("dtype", "param_dtype") and not _decoder_key(k)}
    return dataclasses.replace(cfg, **own)


def _decoder_key(key: str) -> bool:
    from edge_jax.models.config import DecoderKeys

    return key in {f.name for f in dataclasses.fields(DecoderKeys)}


def memory_entries(tables: Checkpoint) -> list:
    """One entry per memory param: stored under its own path, as it is."""
    from edge_jax.interop.family import copy

    return [copy(name, name, tables.shape(name)) for name in tables.names()]


def param_shapes(cfg) -> dict:
    """Our model's params as ``{slash path: ShapeDtypeStruct}``, built abstractly."""
    import flax.linen as nn

    from edge_jax.models.count import abstract_params
    from edge_jax.models.decoder import DecoderLM

    return flatten(nn.unbox(abstract_params(DecoderLM(cfg))["params"]), sep="/")


def import_checkpoint(src: str, workdir: str, say=print) -> dict:
    """Import ``src`` into the new workdir ``workdir``; returns what ``hf_source.json`` records."""
    from edge_jax.hf.lazy_save import Lazy, save_params

    final = str(new_output_dir(workdir if is_remote(workdir) else os.path.abspath(os.path.expanduser(workdir)),
                               "--workdir"))
    directory, family, cfg, entries, ckpt, hf_config = plan(src)
    shapes = param_shapes(cfg)
    mapped = {t.ours for t in entries}
    if set(shapes) != mapped:
        diff = sorted(set(shapes) ^ mapped)
        raise Unsupported(f"the {family} converter and the model disagree on param {diff[0]}")
    tokenizer, note = tokenizer_spec(directory, final, cfg.vocab_size)
    if note:
        say(note)

    def lazy(t):
        want = shapes[t.ours]
        return Lazy(tuple(want.shape), np.dtype(want.dtype),
                    lambda: import_tensor(t, ckpt.read).astype(want.dtype, copy=False))

    params = unflatten({t.ours: lazy(t) for t in entries}, "/")
    with _new_workdir(final) as (tmp, checkpoints):
        os.makedirs(os.path.join(tmp, HF_DIR))
        for name in TOKENIZER_FILES + ("config.json",):
            if os.path.exists(os.path.join(directory, name)):
                shutil.copy2(os.path.join(directory, name), os.path.join(tmp, HF_DIR, name))
        config = edge_config(cfg, tokenizer)
        write_json_atomic(os.path.join(tmp, "config.json"), config.to_dict())
        record = {"source": os.path.abspath(directory) if os.path.isdir(src) else src,
                  "directory": os.path.abspath(directory), "family": family,
                  "model_type": hf_config.get("model_type"), "dtype": cfg.param_dtype,
                  "params": int(sum(np.prod(s.shape) for s in shapes.values())), "tensors": len(ckpt.names())}
        save_params(checkpoints, 0, params)
        _write_tokenizer_record(tmp, final, tokenizer, config)
        write_json_atomic(os.path.join(tmp, SOURCE), record)
    return record


@contextlib.contextmanager
def _new_workdir(final: str) -> Iterator[tuple[str, str]]:
    """``(directory, checkpoints)`` to write the workdir ``final`` in: on a disk a temporary directory renamed to
    ``final`` at the end (and its ``checkpoints``); in a bucket, which has no rename, a local temporary
    directory uploaded at the end, ``config.json`` last (what a reader of a workdir reads first), and the
    checkpoint written in place (orbax commits a step in a bucket itself)."""
    if not is_remote(final):
        with atomic_dir(final, "importing") as tmp:
            yield str(tmp), os.path.join(str(tmp), "checkpoints")
        return
    with tempfile.TemporaryDirectory(prefix="edge-jax-import-") as tmp:
        yield tmp, f"{final}/checkpoints"
        copy_tree_atomic(tmp, final, last=("config.json",))


def _write_tokenizer_record(tmp: str, final: str, tokenizer: str, config) -> None:
    """The record :func:`edge_jax.train.setup.check_tokenizer` compares every later run against (made
    from the files in ``tmp``, under the name they will have in ``final``)."""
    from edge_jax.data import get_tokenizer

    tok = get_tokenizer(tokenizer.replace(final, tmp, 1), config.data.name, config.data.data_dir)
    write_json_atomic(os.path.join(tmp, "tokenizer.json"), {"name": tok.name, "vocab_size": tok.vocab_size})
