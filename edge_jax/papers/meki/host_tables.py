"""Folded MeKi with its tables outside the device: the rows of each step's tokens are gathered on the
host and passed to the model as its host input ``meki_rows`` [B, T, L, d_mem], which is what the
paper's on-device deployment does (MeKi §3.5: ``L x d_mem`` values per token, 14 KB for 28 layers x 256
in fp16). :mod:`edge_jax.papers.meki.bench` decodes with them (``host_fn`` of
:func:`edge_jax.infer.decode.decode_tokens`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from edge_jax.models.decoder import ModelConfig


class HostTables(NamedTuple):
    """Folded MeKi with its tables outside the device (see :func:`host_tables`)."""
    params: dict              # the folded params without ``layers_i/meki/table``
    table_VLM: object         # [V, L, d_mem] in pinned host memory, or a numpy array
    gather: Callable          # tokens [B, T] -> rows [B, T, L, d_mem] on the device (jax.device_put)
    rows: Callable            # tokens [B, T] -> rows [B, T, L, d_mem] as numpy (the host gather alone)
    host_fn: Callable         # tokens [B, T] -> {"meki_rows": rows(tokens)}: the decoder's host_fn
    bytes_per_token: int      # L * d_mem * itemsize moved from the table per token


def host_tables(params, cfg: ModelConfig) -> HostTables:
    """Split the tables off a folded MeKi param tree and stack them [V, L, d_mem] in host memory.

    The stack goes to ``memory_kind="pinned_host"`` when the device offers it (GPUs/TPUs; the CPU
    lists it too, but there it is the same RAM, a no-op) and stays a numpy array otherwise. The
    gather is numpy fancy indexing on a host view of that table (taken once: zero-copy on CPU, a
    second host copy on accelerators) followed by ``device_put`` of the [B, T, L, d_mem] rows.

    In a decode loop pass ``host_fn`` (``{"meki_rows": rows(tokens)}``, numpy) to
    :func:`edge_jax.infer.decode.decode_tokens`: the jitted step copies a numpy argument to the device
    itself, the same bytes as ``gather`` but about 0.2 ms less Python overhead per step than a separate
    ``jax.device_put`` call (measured on CPU, where a tiny model's step takes 0.2 ms).
    """
    if not (cfg.memory == "meki" and cfg.meki_folded):
        raise ValueError("host_tables needs a folded MeKi model (model.memory=meki, meki_folded=True); "
                         "fold it with edge_jax.models.inference.inference_form first")
    params = nn.unbox(params)
    names = [f"layers_{i}" for i in range(cfg.n_layers)]
    table_VLM = np.stack([np.asarray(params[n]["meki"]["table"]) for n in names], axis=1)
    stripped = dict(params)
    for n in names:
        stripped[n] = {**params[n], "meki": {k: v for k, v in params[n]["meki"].items() if k != "table"}}
    dev = next(iter(jax.tree_util.tree_leaves(params)[0].devices()))
    if "pinned_host" in {m.kind for m in dev.addressable_memories()}:
        table = jax.device_put(table_VLM, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        view_VLM = np.asarray(table)
    else:
        table = view_VLM = table_VLM

    def rows(tokens_BT):
        return view_VLM[np.asarray(tokens_BT)]

    def gather(tokens_BT):
        return jax.device_put(rows(tokens_BT), dev)

    def host_fn(tokens_BT):
        return {"meki_rows": rows(tokens_BT)}

    return HostTables(stripped, table, gather, rows, host_fn, cfg.n_layers * cfg.d_mem * table_VLM.dtype.itemsize)
