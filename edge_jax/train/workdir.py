"""A training workdir's own config (``config.json``), read by the loop, ``init_from`` and ``eval``."""
from __future__ import annotations

import json
import os

import ml_collections

from edge_jax.config import flatten, schema_defaults, unflatten, upgrade_config
from edge_jax.errors import UserError, one_line
from edge_jax.utils.storage import epath, is_remote


class WorkdirError(UserError, ValueError):
    """A workdir's own file cannot be read (one line naming the file and the fix)."""


def load_workdir_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a workdir's run was trained with, in today's keys (an older edge_jax's config.json
    upgraded; keys the schema gained since at their defaults)."""
    path = os.path.join(workdir, "config.json")
    if not epath(path).exists():
        raise FileNotFoundError(f"{path} not found; is {workdir!r} a training workdir? run `edge-jax train` first")
    saved = read_saved_config(path)
    return ml_collections.ConfigDict(unflatten({**flatten(schema_defaults(saved).to_dict()), **flatten(saved)}))


def read_json_object(path: str) -> dict:
    """The JSON object a workdir's own file at ``path`` holds; a file that is not one (truncated, overwritten)
    is a :class:`WorkdirError` that names it."""
    try:
        found = json.loads(epath(path).read_bytes().decode("utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        found, why = None, f"{type(e).__name__}: {one_line(e)}"
    else:
        why = f"a JSON {type(found).__name__}, not an object"
    if not isinstance(found, dict):
        raise WorkdirError(f"{path} is damaged ({why}); restore it from a copy of the workdir, or start over "
                           "with a new --workdir")
    return found


def read_saved_config(path: str) -> dict:
    """The config a workdir's ``config.json`` at ``path`` holds, upgraded to today's keys."""
    return upgrade_config(read_json_object(path))


def on_base(config: ml_collections.ConfigDict, base: str, keep: tuple[str, ...] = ()) -> ml_collections.ConfigDict:
    """``config`` set to start from the workdir ``base`` (a run, or an HF import: ``edge-jax hf import``):
    its ``model.*`` keys but those starting with a prefix in ``keep`` (the features the config itself adds on
    top, e.g. ``("infini_",)``), its tokenizer and vocabulary, and ``init_from=base``."""
    saved = load_workdir_config(base)
    for key, value in saved.model.items():
        if key in config.model and not key.startswith(keep):
            config.model[key] = value
    config.data.tokenizer = saved.data.tokenizer
    config.init_from = base if is_remote(base) else os.path.abspath(os.path.expanduser(base))
    return config


def imported_from(workdir: str) -> str | None:
    """Where an HF import came from (``edge-jax hf import`` wrote ``hf_source.json``), or None."""
    path = os.path.join(workdir, "hf_source.json")
    if not epath(path).exists():
        return None
    return str(read_json_object(path).get("source"))
