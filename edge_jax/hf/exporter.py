"""``edge-jax hf export --workdir W --out DIR [--step N]``: a workdir's params as an HF checkpoint.

DIR gets ``config.json`` (the family's), safetensors shards of at most 5 GB with their index, and the
tokenizer files (the imported checkpoint's, or the run's ``hf:`` tokenizer.json), written in a
temporary directory renamed to DIR at the end. The family is the imported one, or the first family
whose form the model has (:func:`pick_family`). A model with a part HF has no form of is refused
in one line naming it: a token-indexed memory (MeKi, PLE, Engram), EdgeInfinite's memory gate, an
NPUMoE capacity plan.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

from edge_jax.config import flatten, unflatten
from edge_jax.errors import UserError
from edge_jax.hf import memory_tables as tables
from edge_jax.hf.importer import HF_DIR, SOURCE, TOKENIZER_FILES
from edge_jax.interop.convert import hf_from_params
from edge_jax.interop.families import family_of
from edge_jax.interop.family import FAMILIES, Unsupported
from edge_jax.interop.safetensors_io import write_shards
from edge_jax.utils import storage
from edge_jax.utils.args import new_output_dir
from edge_jax.utils.atomic import atomic_dir, write_bytes_atomic, write_json_atomic
from edge_jax.utils.storage import epath

SHARD_BYTES = 5 * 10**9


def no_hf_form(config, cfg, memory_tables: bool = False) -> str | None:
    """The part of the model HF has no form of (None: it all has one, or ``memory_tables`` writes the rest)."""
    if cfg.memory != "none" and not memory_tables:
        return (f"model.memory={cfg.memory!r} (a token-indexed memory beside the FFN) has no HF form; "
                "--memory-tables writes the decoder for transformers and the memory's inference form beside it")
    if cfg.infini_hidden:
        return "EdgeInfinite's memory gate (model.infini_*) has no HF form"
    strategy = config.get("moe", {}).get("strategy", "dropless")
    if strategy != "dropless":
        return (f"the MoE capacity plan (moe.strategy={strategy!r}) has no HF form; the experts export from a "
                "run with moe.strategy=dropless")
    return None


def pick_family(workdir: str, cfg, paths: set, with_memory: bool) -> tuple[str, object]:
    """The imported family, else the first registered one whose tensor map covers ``paths`` (all of them,
    or with ``with_memory`` all but the memory's)."""
    source = epath(os.path.join(workdir, SOURCE))
    if source.exists():
        return family_of(json.loads(source.read_text())["model_type"])
    why = []
    for name, fam in FAMILIES.items():
        try:
            fam.hf_config(cfg)
            mine = {t.ours for t in fam.tensors(cfg)}
            if mine == paths or (with_memory and mine < paths):
                return name, fam
            why.append(f"{name}: other params")
        except Unsupported as e:
            why.append(f"{name}: {e}")
    raise Unsupported(f"no HF family has this model's form ({'; '.join(why)})")


def export_workdir(workdir: str, out: str, step: int = 0, max_shard_bytes: int = SHARD_BYTES,
                   memory_tables: bool = False) -> dict:
    """Write the HF checkpoint of ``workdir``'s step ``step`` (0: the newest) to the new directory ``out``;
    ``memory_tables``: a model with a token-indexed memory too (:mod:`edge_jax.hf.memory_tables`)."""
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.setup import model_config
    from edge_jax.train.workdir import load_workdir_config

    final = new_output_dir(os.path.abspath(os.path.expanduser(out)), "--out")

    config = load_workdir_config(workdir)
    cfg = model_config(config)
    reason = no_hf_form(config, cfg, memory_tables)
    if reason:
        raise Unsupported(f"cannot export {workdir}: {reason}")
    _check_step(workdir, step)
    params, config = restore_params(workdir, step, one_device=True)  # a pod's run exports on a laptop
    with_memory = cfg.memory != "none"
    if with_memory:
        from edge_jax.models.inference import inference_form

        params, cfg = inference_form(params, cfg)
    flat = flatten(params, sep="/")
    name, fam = pick_family(workdir, cfg, set(flat), with_memory)
    decoder, memory = tables.split(flat, {t.ours for t in fam.tensors(cfg)})
    params = unflatten(decoder, "/")
    dtype_name = str(np.dtype(next(iter(decoder.values())).dtype))
    hf_config = {**fam.hf_config(cfg), "dtype": dtype_name, "torch_dtype": dtype_name}  # 5.x and 4.x names
    entries = fam.tensors(cfg)
    items = []
    for t in entries:
        if not t.exported:  # a part of a tensor another entry writes whole
            continue
        dtype = np.dtype(flat[t.ours].dtype)
        items += [(n, t.hf_shape, dtype) for n in t.hf]
    with atomic_dir(final, "exporting") as tmp:
        files = write_shards(str(tmp), items, lambda: (a for _, a in hf_from_params(fam, cfg, params)),
                             max_shard_bytes)
        write_json_atomic(tmp / "config.json", hf_config)
        _copy_tokenizer(workdir, config, str(tmp))
        if memory:
            tables.write(str(tmp), memory, cfg.as_keys())
    return {"family": name, "files": len(files), "tensors": len(items), "memory_tables": len(memory),
            "bytes": int(sum(int(np.prod(s)) * d.itemsize for _, s, d in items))}


def _check_step(workdir: str, step: int) -> None:
    where = storage.path(os.path.join(workdir, "checkpoints"))  # the workdir may be in a bucket
    steps = sorted(int(p.name) for p in where.iterdir() if p.name.isdigit()) if where.is_dir() else []
    if not steps:
        raise UserError(f"{workdir} has no checkpoints; train or import into it first")
    if step and step not in steps:
        raise UserError(f"{workdir} has no checkpoint at --step {step}; its steps: {', '.join(map(str, steps))}")


def _copy_tokenizer(workdir: str, config, dest: str) -> None:
    """The imported checkpoint's tokenizer files, else the run's own ``hf:`` tokenizer.json."""
    kept = epath(os.path.join(workdir, HF_DIR))  # the workdir may be in a bucket
    if kept.is_dir():
        for name in TOKENIZER_FILES:
            if (kept / name).exists():
                write_bytes_atomic(os.path.join(dest, name), (kept / name).read_bytes())
        return
    kind, _, path = str(config.data.tokenizer).partition(":")
    if kind == "hf" and os.path.exists(path):
        shutil.copy2(path, os.path.join(dest, "tokenizer.json"))
