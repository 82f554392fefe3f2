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
