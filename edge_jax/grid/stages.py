"""Shared prerequisite runs of a grid ("stages"): e.g. a base LM that every cell fine-tunes.

A grid may declare ``"stages": {name: {"base": config spec, "overrides": {...}, "shared": bool}}``
and cells (or later stages) refer to a stage's workdir as the string ``"{stage:name}"`` in an override
value (usually ``init_from``). Before a unit runs, each stage it refers to is trained, once, in

    <parent of OUT>/_stages/<name>-<hash of its full config>/seed<s>/

(``seed`` 0 for a ``shared`` stage, the unit's seed otherwise), so every grid beside OUT that needs
the same run finds it there. The hash also covers the key of the documents the stage trains on
(:func:`data_key`: a built-in dataset's version is part of it), so a stage is never resumed or reused
on other documents than it started with. ``--set`` overrides of the grid command do not reach stages.
A stage is done when its ``final_metrics.json`` exists; an unfinished one resumes from its checkpoints. An
exclusive lock per stage workdir (:func:`edge_jax.grid.locks.locked`, ``seed<s>.lock`` beside it) keeps
parallel grid processes (``--cell K`` in several shells) from training it twice: the others wait for it,
and log who holds it; in a job of several processes process 0 takes the lock and decides, and all of
them train the stage together (edge_jax.distributed). A finished stage written before a config key
was renamed (its directory hash differs) is found by its upgraded ``config.json`` and reused when its
``data_key.txt`` names the same documents.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable

from edge_jax import distributed
from edge_jax.grid import locks
from edge_jax.utils import storage
from edge_jax.utils.atomic import write_text_atomic

_REF = re.compile(r"\{stage:([A-Za-z0-9_]+)\}")
STAGE_KEYS = ("base", "overrides", "shared")
HASH_IGNORED = ("data.data_dir", "train.ckpt_every", "train.keep_ckpts", "train.log_every")
DATA_KEY_FILE = "data_key.txt"


def data_key(config) -> str:
    """The key of the documents ``config`` trains on (it changes whenever they can change, e.g. with a
    built-in dataset's version); '' for a config without a data section."""
    if "data" not in config or not config.data.get("name"):
        return ""
    from edge_jax.data.sources import resolve_cfg
    return resolve_cfg(config.data).key


def check_stages(stages: Any, cells: dict, fail) -> dict:
    """Validate the ``stages`` entry of a grid (every reference names a stage declared earlier)."""
    if not isinstance(stages, dict):
        raise fail("'stages' must be a dict of stage name -> {base, overrides, shared}")
    seen: list[str] = []
    for name, stage in stages.items():
        if not isinstance(stage, dict) or set(stage) - set(STAGE_KEYS) or "base" not in stage:
            raise fail(f"stage {name!r} must be a dict with 'base' and optional 'overrides', 'shared'")
        for ref in references(stage.get("overrides", {})):
            if ref not in seen:
                raise fail(f"stage {name!r} refers to {{stage:{ref}}}, which is not declared before it")
        seen.append(name)
    for cell, overrides in cells.items():
        for ref in references(overrides):
            if ref not in stages:
                raise fail(f"cell {cell!r} refers to {{stage:{ref}}}; declared stages: {', '.join(stages) or 'none'}")
    return dict(stages)


def references(overrides: dict) -> list[str]:
    return [m for v in overrides.values() if isinstance(v, str) for m in _REF.findall(v)]


def _identity(config: dict, defaults: dict) -> dict:
    """The flat keys that tell runs apart: those off their schema default, less seed and HASH_IGNORED."""
    return {k: v for k, v in config.items()
            if k not in HASH_IGNORED and k != "seed" and (k not in defaults or defaults[k] != v)}


def stage_dir(root: Path, name: str, config) -> Path:
    """``root/_stages/<name>-<hash>``: the hash covers every config key that differs from its schema
    default (so keys added to the schema later, at their defaults, leave trained stages where they are)
    and the documents' key."""
    from edge_jax.config import flat_json, schema_defaults
    kept = _identity(flat_json(config), flat_json(schema_defaults(config)))
    kept["data_key"] = data_key(config)
    digest = hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:10]
    return root / "_stages" / f"{name}-{digest}"


def _older_stage(root: Path, name: str, s: int, config) -> Path | None:
    """A finished ``name`` stage for seed ``s`` whose config, upgraded to today's keys
    (:func:`edge_jax.config.upgrade_config`), is ``config`` and whose documents are the same: written
    before a key was renamed. A config that takes its vocabulary size from the tokenizer (0) matches
    whatever size the stage's workdir resolved."""
    from edge_jax.config import flat_json, schema_defaults, upgrade_config
    defaults = flat_json(schema_defaults(config))
    want = _identity(flat_json(config), defaults)
    documents = data_key(config)
    from_tokenizer = not flat_json(config).get("model.vocab_size")
    for wd in sorted((root / "_stages").glob(f"{name}-*/seed{s}")):
        path, recorded = wd / "config.json", wd / DATA_KEY_FILE
        if (wd / "final_metrics.json").exists() and path.exists() and recorded.exists() \
                and recorded.read_text().strip() == documents:
            found = flat_json(upgrade_config(json.loads(path.read_text())))
            if from_tokenizer:  # the workdir holds the size training took from the tokenizer (same documents)
                found.pop("model.vocab_size", None)
            if _identity(found, defaults) == want:
                return wd
    return None


def resolve(overrides: dict, stages: dict, seed: int, root: Path, train_fn: Callable, load_config: Callable,
            log: Callable[[str], None] = print) -> dict:
    """``overrides`` with every ``{stage:name}`` replaced by that stage's trained workdir."""
    out = {}
    for key, value in overrides.items():
        if isinstance(value, str):
            for name in set(_REF.findall(value)):
                value = value.replace(f"{{stage:{name}}}",
                                      str(ensure(name, stages, seed, root, train_fn, load_config, log)))
        out[key] = value
    return out


def ensure(name: str, stages: dict, seed: int, root: Path, train_fn: Callable, load_config: Callable,
           log: Callable[[str], None] = print) -> Path:
    """Train stage ``name`` for ``seed`` unless done; return its workdir."""
    stage = stages[name]
    s = 0 if stage.get("shared") else seed
    overrides = resolve(dict(stage.get("overrides", {})), stages, seed, root, train_fn, load_config, log)
    config = load_config(stage["base"], {**overrides, "seed": s})
    wd = stage_dir(root, name, config) / f"seed{s}"
    if not storage.is_remote(wd):
        with contextlib.suppress(ValueError):  # a path relative to the working directory when below it
            wd = wd.relative_to(Path.cwd())
    done = (wd / "final_metrics.json").exists
    if distributed.on_lead(f"stage {wd}", done):
        return wd
    def older_stage() -> str | None:
        found = _older_stage(root, name, s, config)
        return None if found is None else str(found)

    older = distributed.on_lead(f"older stage {wd}", older_stage)
    if older is not None:
        log(f"stage {name} seed {s}: reusing {older} (its config predates a key rename)")
        return storage.path(older)
    wd.mkdir(parents=True, exist_ok=True)
    with locks.locked(wd.parent / f"seed{s}.lock", log, what=f"stage {name} seed {s}"):
        if not distributed.on_lead(f"stage {wd} locked", done):
            log(f"stage {name} seed {s}: training in {wd}")
            write_text_atomic(wd / DATA_KEY_FILE, data_key(config) + "\n")
            train_fn(config, str(wd))
    return wd

