"""A model's inference form: its trained params re-parameterised for deployment, as its memory kind
defines it (:class:`~edge_jax.layers.token_memory.base.MemoryKind` ``inference_form`` /
``inference_config``; e.g. a memory evaluated once over the vocabulary into a lookup table). A model
whose memory kind defines none is its own inference form.

``edge-jax eval --fold`` scores this form; parameter counts read :func:`inference_config`.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import flax.linen as nn

from edge_jax.layers.token_memory.base import MEMORY_KINDS, InferenceFormError
from edge_jax.models.decoder import ModelConfig
from edge_jax.models.scan import stack_layers, unstack_layers

__all__ = ["InferenceFormError", "has_inference_form", "inference_config", "inference_form"]


def has_inference_form(cfg: ModelConfig) -> bool:
    """Whether ``cfg``'s memory kind defines an inference form other than the model itself."""
    return MEMORY_KINDS.get(cfg.memory).inference_form is not None


def inference_form(params: Mapping, cfg: ModelConfig) -> tuple[dict, ModelConfig]:
    """``(inference_params, inference_cfg)``; ``params`` is unchanged (unchanged leaves are shared).
    A scanned model (``model.scan_layers``) is converted layer by layer and stacked again. Raises
    :class:`InferenceFormError` for params that have none (e.g. already converted)."""
    convert = MEMORY_KINDS.get(cfg.memory).inference_form
    if convert is None:
        return params, cfg
    if cfg.scan_layers:
        out, out_cfg = convert(unstack_layers(nn.unbox(params)), dataclasses.replace(cfg, scan_layers=False))
        return stack_layers(out, cfg.n_layers), dataclasses.replace(out_cfg, scan_layers=True)
    return convert(params, cfg)


def inference_config(cfg: ModelConfig) -> ModelConfig:
    """The config of :func:`inference_form` alone (``cfg`` itself when the memory kind has none)."""
    make = MEMORY_KINDS.get(cfg.memory).inference_config
    return cfg if make is None else make(cfg)
