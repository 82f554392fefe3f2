"""Model inputs beyond the token ids, computed on the host beside the data pipeline.

Engram hashes n-grams in int64 arithmetic, which JAX (int32 by default) should not do, so the
ids are built with numpy from the token batch before it goes to the devices. Every caller of
the model (train and eval steps, generation, decoding, analyses) goes through these helpers.
"""
from __future__ import annotations

import numpy as np

from edge_jax.models.decoder import ModelConfig

EXTRA_KEYS = ("ngram_ids",)


def host_inputs(cfg: ModelConfig, tokens_BT) -> dict:
    """``{}`` or ``{"ngram_ids": int32 [B, T, N]}`` for the model described by ``cfg``."""
    if cfg.memory != "engram":
        return {}
    from edge_jax.layers.token_memory.ngram_hash import ngram_hash_ids
    return {"ngram_ids": ngram_hash_ids(np.asarray(tokens_BT), cfg.engram_orders, cfg.engram_heads,
                                        cfg.engram_table_size)}


def with_host_inputs(cfg: ModelConfig, batch: dict) -> dict:
    """A data batch (``inputs``, ``targets``, ...) with the model's host inputs added."""
    return {**batch, **host_inputs(cfg, batch["inputs"])} if cfg.memory == "engram" else batch


def model_kwargs(batch: dict) -> dict:
    """The extra keyword arguments for ``model.apply`` found in a batch."""
    return {k: batch[k] for k in EXTRA_KEYS if k in batch}


def example_inputs(cfg: ModelConfig, batch: int = 1, seq_len: int = 8) -> dict:
    """Arguments for ``model.init``: zero tokens plus their host inputs."""
    tokens = np.zeros((batch, seq_len), np.int32)
    return {"tokens_BT": tokens, **host_inputs(cfg, tokens)}
