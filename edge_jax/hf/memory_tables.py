"""A token-indexed memory's inference form written beside an HF export, and read back by ``hf import``.

transformers has no form of a memory beside the FFN (MeKi, PLE, Engram), so ``hf export`` refuses such a
model unless ``--memory-tables``: then the decoder goes out as the HF family's files and the memory's
inference-form params (MeKi: one folded ``[V, d_mem]`` table per layer with its output projection,
:func:`edge_jax.models.inference.inference_form`) go to :data:`TABLES`, a safetensors file keyed by our
param paths (``layers_0/meki/table``), with :data:`META` holding every ``model.*`` key. transformers
reads the decoder and ignores both files; ``edge-jax hf import`` of that directory reads all three back
into the model that was exported, in its inference form.
"""
from __future__ import annotations

import json
import os

import numpy as np

from edge_jax.interop.safetensors_io import Checkpoint, write_shards

TABLES = "edge_jax_memory.safetensors"
META = "edge_jax_memory.json"


def split(flat: dict, decoder_paths: set) -> tuple[dict, dict]:
    """``(decoder params, the rest)`` of flat params."""
    return ({k: v for k, v in flat.items() if k in decoder_paths},
            {k: v for k, v in flat.items() if k not in decoder_paths})


def write(directory: str, memory: dict, model_keys: dict) -> None:
    """The memory's params (``{path: array}``) and the model's keys beside the HF files in ``directory``."""
    items = [(k, tuple(np.shape(v)), np.dtype(np.asarray(v).dtype)) for k, v in sorted(memory.items())]
    write_shards(directory, items, lambda: (np.asarray(memory[k]) for k, _, _ in items), 2**62, single=TABLES)
    with open(os.path.join(directory, META), "w") as f:
        json.dump({"model": model_keys, "tables": TABLES,
                   "read_by": "edge-jax hf import DIR (transformers ignores this file)"}, f, indent=1)


def read(directory: str) -> tuple[dict, Checkpoint] | None:
    """``(model keys, the tables' reader)`` of an export with memory tables, None without."""
    path = os.path.join(directory, META)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        meta = json.load(f)
    return dict(meta["model"]), Checkpoint(directory, [meta["tables"]])
