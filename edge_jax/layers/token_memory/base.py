"""How a token-indexed memory joins the decoder: residual branches at named sites of a block.

A block (:class:`edge_jax.models.decoder.Block`) adds every branch's output to the residual
stream at its site, in this order::

    pre_attn   h += f(h)           before the attention norm (Engram)
    attn       h += f(x_attn)      beside attention, from its pre-norm input
    post_attn  h += f(h)           after the attention residual
    ffn        h += f(x_ffn)       beside the FFN, from its pre-norm input (MeKi, eq. 8)
    post_ffn   h += f(h)           at the end of the layer (PLE)

A memory kind (``model.memory``) is a :class:`MemoryKind` registered in :data:`MEMORY_KINDS`;
its keys are declared once next to it (a :class:`edge_jax.registry.Section`). Everything the generic
code needs to know about a kind is on its :class:`MemoryKind`: the inputs it takes from outside the
model (and those it computes on the host from the token ids, with their shapes for ahead-of-time
compilation), why its layers may differ (no scanned stack) or why the KV-cache decoder cannot run it,
and its inference form (a re-parameterisation of trained params for deployment).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Registry, Section

SITES = ("pre_attn", "attn", "post_attn", "ffn", "post_ffn")


@dataclasses.dataclass(frozen=True)
class Placement:
    """A branch's site in the block; ``own_norm``: it normalises its input itself."""
    site: str
    own_norm: bool = False

    def __post_init__(self):
        if self.site not in SITES:
            raise ValueError(f"unknown block site {self.site!r}; valid: {', '.join(SITES)}")


class InferenceFormError(ValueError):
    """Params that have no inference form to compute (e.g. already in it)."""


@dataclasses.dataclass(frozen=True)
class MemoryKind:
    """``branches(cfg, layer) -> {site: fn(x_BTD, ctx) -> delta_BTD}`` builds the layer's branches
    (inside the block's compact scope, so their params live under ``layers_i``). ``prepare(cfg, ctx)``
    runs once per forward at model level, in the model's scope: it checks the host inputs and adds
    what every layer shares to ``ctx``. ``per_layer``: the ``ctx`` entries with a layer axis
    (``[B, T, L, ...]``, e.g. PLE's per-layer inputs); the decoder hands each block its layer's slice
    ``[B, T, ...]`` under the same name (sliced in the unrolled loop, scanned over with
    ``model.scan_layers``), so a branch never indexes by layer.

    Host inputs (arrays the model takes from outside, ``DecoderLM(...)(tokens, host_inputs={...})``;
    they land in ``ctx`` under their names):

    * ``accepts``: every name the model may be given (the decoder refuses any other);
    * ``host_inputs(cfg, tokens_BT numpy) -> {name: numpy array}``: those computed on the host from
      the token ids for every forward (the data pipeline, eval and generation add them);
      ``host_shapes(cfg, batch, seq) -> {name: (shape, dtype)}`` their shapes without computing them
      (ahead-of-time compilation); left None, they come from ``host_inputs`` on zero tokens.

    Limits and forms, each None when it does not apply:

    * ``scan_blocker(cfg) -> str | None``: why the layers differ, so the stack cannot be one scanned
      block (a sentence naming the config key);
    * ``decode_blocker(cfg) -> str | None``: why the KV-cache decoder cannot run the model;
    * ``inference_form(params, cfg) -> (params, cfg)``: the deployment form of trained params (pure;
      raises :class:`InferenceFormError` for params that have none), ``inference_config(cfg)`` its
      config alone (e.g. for parameter counts)."""
    branches: Callable
    prepare: Callable | None = None
    accepts: tuple = ()
    per_layer: tuple = ()
    host_inputs: Callable | None = None
    host_shapes: Callable | None = None
    scan_blocker: Callable | None = None
    decode_blocker: Callable | None = None
    inference_form: Callable | None = None
    inference_config: Callable | None = None

    def __post_init__(self):
        if (self.inference_form is None) != (self.inference_config is None):
            raise ValueError("a memory kind's inference_form and inference_config come together; give both")


MEMORY_KINDS: Registry[MemoryKind] = Registry("memory kind", key="model.memory")
MEMORY_KINDS.register("none", MemoryKind(lambda cfg, layer: {}))


@dataclasses.dataclass(frozen=True)
class MemoryKeys:
    """``model.memory`` picks the kind; ``model.d_mem`` is its width (MeKi memory width, PLE
    per-layer width, Engram per-head width)."""
    memory: str = "none"
    d_mem: int = 0


def _validate(c) -> None:
    m = c.model
    MEMORY_KINDS.check(m.memory)
    if m.memory != "none" and m.d_mem <= 0:
        raise ConfigError(f"model.d_mem={m.d_mem} must be positive with model.memory={m.memory!r}; "
                          "set e.g. model.d_mem=64")


SECTIONS.register("memory", Section("model", MemoryKeys, _validate))
