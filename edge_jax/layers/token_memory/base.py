"""How a token-indexed memory joins the decoder: residual branches at named sites of a block.

A block (:class:`edge_jax.models.decoder.Block`) adds every branch's output to the residual
stream at its site, in this order::

    pre_attn   h += f(h)           before the attention norm (Engram)
    attn       h += f(x_attn)      beside attention, from its pre-norm input
    post_attn  h += f(h)           after the attention residual
    ffn        h += f(x_ffn)       beside the FFN, from its pre-norm input (MeKi, eq. 8)
    post_ffn   h += f(h)           at the end of the layer (PLE)

A memory kind (``model.memory``) is a :class:`MemoryKind` registered in :data:`MEMORY_KINDS`;
its keys are declared once next to it (a :class:`edge_jax.registry.Section`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Registry, Section

SITES = ("pre_attn", "attn", "post_attn", "ffn", "post_ffn")
HOST_INPUTS = ("meki_rows", "ngram_ids")  # model inputs computed outside the model, per memory kind


@dataclasses.dataclass(frozen=True)
class Placement:
    """A branch's site in the block; ``own_norm``: it normalises its input itself."""
    site: str
    own_norm: bool = False

    def __post_init__(self):
        if self.site not in SITES:
            raise ValueError(f"unknown block site {self.site!r}; valid: {', '.join(SITES)}")


@dataclasses.dataclass(frozen=True)
class MemoryKind:
    """``branches(cfg, layer) -> {site: fn(x_BTD, ctx) -> delta_BTD}`` builds the layer's branches
    (inside the block's compact scope, so their params live under ``layers_i``). ``prepare(cfg, ctx)``
    runs once per forward at model level, in the model's scope: it checks the host inputs and adds
    what every layer shares to ``ctx``. ``accepts``: the host inputs (:data:`HOST_INPUTS`) it takes.
    ``per_layer``: the ``ctx`` entries with a layer axis (``[B, T, L, ...]``, e.g. PLE's per-layer
    inputs); the decoder hands each block its layer's slice ``[B, T, ...]`` under the same name
    (sliced in the unrolled loop, scanned over with ``model.scan_layers``), so a branch never
    indexes by layer."""
    branches: Callable
    prepare: Callable | None = None
    accepts: tuple = ()
    per_layer: tuple = ()


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
