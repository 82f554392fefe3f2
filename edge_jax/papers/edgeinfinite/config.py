"""EdgeInfinite's own config checks and upgrades. Its memory's keys (``model.infini_*``) sit beside
the attention kinds (:mod:`edge_jax.layers.attention.kinds`); the long-context harness that evaluates
it and the KV-cache baselines has its own section, ``longctx`` (:mod:`edge_jax.infer.longctx_config`).
Here: training the gate needs the memory and a base to start from; the in-window check of a base LM
(``longctx.inwindow_*``) runs its full attention, so not with the memory; and the upgrade of older
workdirs and records (the gate's old trainable keys; the harness's ``longctx.sink`` and
``longctx.budget``, which before the harness had its own keys were EdgeInfinite's sizes).
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.registry import SECTIONS, Section


def _validate(c) -> None:
    m, t = c.model, c.train
    if "memory_gate" in t.trainable and not (m.infini_hidden and c.init_from):
        raise ConfigError(f"train.trainable={t.trainable!r} trains EdgeInfinite's gate on a frozen base: set "
                          "model.infini_hidden > 0 and init_from=<base workdir>")
    if c.longctx.inwindow_examples and m.infini_hidden:
        raise ConfigError("longctx.inwindow_examples checks a base LM with full attention; set it to 0 for a run "
                          "with EdgeInfinite's memory (model.infini_hidden > 0)")


GATE = ".*memory_gate.*"  # the memory-gating modules' param paths


def _upgrade(flat: dict) -> None:
    """Workdirs before trainable patterns: ``train.trainable=memory_gate`` and ``train.gate_lr``
    (the gate logits' own learning rate) become a pattern and a multiplier of ``train.lr``. Configs
    before ``longctx.sink``, with EdgeInfinite's sizes set (``model.infini_segment`` > 0): StreamingLLM
    kept ``model.infini_sink`` sink tokens, and ``longctx.budget=0`` stood for sink + window + segment
    slots; both become explicit, the values those runs used."""
    if flat.get("train.trainable") == "memory_gate":
        flat["train.trainable"] = GATE
    gate_lr = flat.pop("train.gate_lr", 0.0)
    if gate_lr:
        flat["train.lr_multipliers"] = [f".*memory_gate/g={gate_lr / flat['train.lr']!r}"]
    if "longctx.sink" not in flat and flat.get("model.infini_segment", 0) > 0:
        sink = flat.get("model.infini_sink", 0)
        flat["longctx.sink"] = sink
        if not flat.get("longctx.budget"):
            flat["longctx.budget"] = sink + flat.get("model.infini_window", 0) + flat["model.infini_segment"]


@dataclasses.dataclass(frozen=True)
class NoKeys:
    """EdgeInfinite declares no keys here (``model.infini_*`` are the attention kind's)."""


SECTIONS.register("edgeinfinite", Section("model", NoKeys, _validate, upgrade=_upgrade))
