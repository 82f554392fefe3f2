"""EdgeInfinite's settings, declared once: the ``model.infini_*`` config keys and what a layer reads.

:class:`InfiniSpec` is both the key declaration (its fields are the ``model.*`` keys, registered as a
config section by :mod:`edge_jax.layers.attention.kinds`) and the static settings an attention layer
takes (``ModelConfig.infini_spec()``). The layer reads the properties, which apply Table 2's keep
switches: ``infini_keep_sink=False`` makes ``sink`` 0, ``infini_keep_window=False`` makes ``window`` 0.
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.layers.infini.compressive import MEMORY_UPDATES


@dataclasses.dataclass(frozen=True)
class InfiniSpec:
    """``model.*`` keys of EdgeInfinite's memory on GQA: the memory-gating MLP width per head (0: off),
    the initial gate logit, the segmented layout (sink, window, segment tokens), the memory update
    rule and ε; the keep switches drop the sink or window tokens at inference (Table 2)."""
    infini_hidden: int = 0
    infini_gate_init: float = 0.0
    infini_sink: int = 0
    infini_window: int = 0
    infini_segment: int = 0
    infini_update: str = "linear"
    infini_eps: float = 1e-6
    infini_keep_sink: bool = True
    infini_keep_window: bool = True

    @classmethod
    def of(cls, cfg) -> "InfiniSpec | None":
        """The settings of a model config (anything with the ``infini_*`` attributes), or None without
        the memory gate (``infini_hidden`` 0)."""
        if cfg.infini_hidden <= 0:
            return None
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})

    @property
    def hidden(self) -> int:
        return self.infini_hidden

    @property
    def gate_init(self) -> float:
        return self.infini_gate_init

    @property
    def sink(self) -> int:
        """Sink tokens the layer keeps (0 when ``infini_keep_sink`` is off)."""
        return self.infini_sink if self.infini_keep_sink else 0

    @property
    def window(self) -> int:
        """Window tokens the layer keeps (0 when ``infini_keep_window`` is off)."""
        return self.infini_window if self.infini_keep_window else 0

    @property
    def segment(self) -> int:
        return self.infini_segment

    @property
    def update(self) -> str:
        return self.infini_update

    @property
    def eps(self) -> float:
        return self.infini_eps


def validate(c) -> None:
    """One-line ConfigErrors for the ``model.infini_*`` keys of config ``c``."""
    m = c.model
    if m.infini_hidden < 0:
        raise ConfigError(f"model.infini_hidden={m.infini_hidden} must be >= 0 (0: no EdgeInfinite memory gate)")
    if not m.infini_hidden:
        return
    if m.infini_update not in MEMORY_UPDATES:
        raise ConfigError(f"unknown model.infini_update value {m.infini_update!r}; valid: {', '.join(MEMORY_UPDATES)}")
    if m.attention != "gqa":
        raise ConfigError("EdgeInfinite (model.infini_hidden > 0) needs model.attention=gqa")
    if m.infini_segment <= 0 or m.infini_sink < 0 or m.infini_window < 0:
        raise ConfigError(f"model.infini_segment={m.infini_segment} must be positive and infini_sink, "
                          "infini_window >= 0; set e.g. model.infini_segment=128")
    if m.infini_segment < m.infini_window:
        raise ConfigError(f"model.infini_segment={m.infini_segment} is shorter than model.infini_window="
                          f"{m.infini_window}; use a segment at least as long as the window")
