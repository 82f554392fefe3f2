"""A training workdir's own config (``config.json``), read by the loop, ``init_from`` and ``eval``."""
from __future__ import annotations

import json
import os

import ml_collections

from edge_jax.config import flatten, schema_defaults, unflatten, upgrade_config


def load_workdir_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a workdir's run was trained with, in today's keys (an older edge_jax's config.json
    upgraded; keys the schema gained since at their defaults)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found; is {workdir!r} a training workdir? run `edge-jax train` first")
    with open(path) as f:
        saved = upgrade_config(json.load(f))
    return ml_collections.ConfigDict(unflatten({**flatten(schema_defaults(saved).to_dict()), **flatten(saved)}))


def on_base(config: ml_collections.ConfigDict, base: str, keep: tuple[str, ...] = ()) -> ml_collections.ConfigDict:
    """``config`` set to start from the workdir ``base`` (a run, or an HF import: ``edge-jax hf import``):
    its ``model.*`` keys but those starting with a prefix in ``keep`` (the features the config itself adds on
    top, e.g. ``("infini_",)``), its tokenizer and vocabulary, and ``init_from=base``."""
    saved = load_workdir_config(base)
    for key, value in saved.model.items():
        if key in config.model and not key.startswith(keep):
            config.model[key] = value
    config.data.tokenizer = saved.data.tokenizer
    config.init_from = os.path.abspath(os.path.expanduser(base))
    return config


def imported_from(workdir: str) -> str | None:
    """Where an HF import came from (``edge-jax hf import`` wrote ``hf_source.json``), or None."""
    path = os.path.join(workdir, "hf_source.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return str(json.load(f).get("source"))
