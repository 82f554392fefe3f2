"""Model inputs beyond the token ids, computed on the host beside the data pipeline.

A memory kind may need arrays computed from the token ids outside the model (e.g. hashes in int64
arithmetic, which JAX, int32 by default, should not do): its
:class:`~edge_jax.layers.token_memory.base.MemoryKind` says which (``host_inputs``, ``host_shapes``,
``accepts``). They are built with numpy from the token batch before it goes to the devices, ride in
the batch under their names beside ``inputs`` and ``targets``, and reach the model as one dict:
``model.apply(variables, tokens, host_inputs={...})``. Every caller of the model (train and eval steps,
generation, decoding, analyses) goes through these helpers.
"""
from __future__ import annotations

import numpy as np

from edge_jax.layers.token_memory.base import MEMORY_KINDS
from edge_jax.models.decoder import ModelConfig


def host_inputs(cfg: ModelConfig, tokens_BT) -> dict:
    """``{name: numpy array}``: the host inputs of the model described by ``cfg`` for ``tokens_BT``
    (``{}`` when its memory kind has none)."""
    make = MEMORY_KINDS.get(cfg.memory).host_inputs
    return {} if make is None else make(cfg, tokens_BT)


def host_shapes(cfg: ModelConfig, batch: int, seq: int) -> dict:
    """``{name: (shape, dtype)}`` of :func:`host_inputs` for a ``[batch, seq]`` token batch, without
    computing them when the memory kind declares its shapes."""
    kind = MEMORY_KINDS.get(cfg.memory)
    if kind.host_shapes is not None:
        return kind.host_shapes(cfg, batch, seq)
    return {k: (v.shape, v.dtype) for k, v in host_inputs(cfg, np.zeros((batch, seq), np.int32)).items()}


def host_input_names() -> tuple[str, ...]:
    """Every name some registered memory kind accepts as a host input (the batch keys that are one)."""
    return tuple(dict.fromkeys(n for _, kind in MEMORY_KINDS.items() for n in kind.accepts))


def with_host_inputs(cfg: ModelConfig, batch: dict) -> dict:
    """A data batch (``inputs``, ``targets``, ...) with the model's host inputs added under their names."""
    extra = host_inputs(cfg, batch["inputs"])
    return {**batch, **extra} if extra else batch


def apply_kwargs(host: dict) -> dict:
    """The keyword arguments for ``model.apply`` that pass ``host`` (``{}`` when there is none, so a
    model without host inputs is called exactly as before)."""
    return {"host_inputs": dict(host)} if host else {}


def model_kwargs(batch: dict) -> dict:
    """The extra keyword arguments for ``model.apply`` found in a batch: its host inputs."""
    return apply_kwargs({k: batch[k] for k in host_input_names() if k in batch})


def example_inputs(cfg: ModelConfig, batch: int = 1, seq_len: int = 8) -> dict:
    """Arguments for ``model.init``: zero tokens plus their host inputs."""
    tokens = np.zeros((batch, seq_len), np.int32)
    return {"tokens_BT": tokens, **apply_kwargs(host_inputs(cfg, tokens))}
