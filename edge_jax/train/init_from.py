"""Start a run from another run's params (``init_from=<workdir>``): EdgeInfinite's frozen base.

The source workdir's own ``config.json`` rebuilds its train state, its latest checkpoint is
restored, and every param the new model shares with it is copied over. Params only the new model
has (the memory-gating modules) keep their initialisation; anything else that differs (a missing
or extra param, another shape, another tokenizer) is a one-line error naming the fix.
"""
from __future__ import annotations

import os

import jax
import ml_collections

from edge_jax.config import ConfigError
from edge_jax.train.checkpoint import Checkpointer

NEW_PARAMS = ("memory_gate",)  # param subtrees a model may add on top of its init_from source


def _flat(tree) -> dict:
    return {tuple(str(getattr(k, "key", k)) for k in path): leaf
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def restore_params(workdir: str):
    """``(params, config)`` of the latest checkpoint in a training workdir."""
    from edge_jax.train.loop import load_workdir_config
    from edge_jax.train.setup import build
    from edge_jax.train.state import abstract_train_state
    ckpt_dir = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(ckpt_dir):
        raise ConfigError(f"init_from={workdir!r} has no checkpoints; train the base there first "
                          "(edge-jax train --workdir ...)")
    config = load_workdir_config(workdir)
    run = build(ml_collections.ConfigDict(config.to_dict()))
    ckpt = Checkpointer(ckpt_dir, 1, 1)
    try:
        step = ckpt.latest_step()
        if step is None:
            raise ConfigError(f"init_from={workdir!r} has no finished checkpoint; let its training finish first")
        state, _ = ckpt.restore(step, abstract_train_state(run.model, run.tx, run.mesh)[0])
    finally:
        ckpt.close()
    return state.params, config


def merge_params(target, source, where: str):
    """``target`` with every leaf ``source`` also has replaced by the source's value."""
    have, want = _flat(source), _flat(target)
    extra = [k for k in have if k not in want]
    if extra:
        raise ConfigError(f"init_from={where!r} has param {'/'.join(extra[0])} that this model lacks; the base and "
                          "this config describe different models (check model.* against the base's config.json)")
    for key, leaf in want.items():
        if key in have and have[key].shape != leaf.shape:
            raise ConfigError(f"init_from={where!r}: param {'/'.join(key)} has shape {have[key].shape}, this model "
                              f"{leaf.shape}; use the base's model.* sizes")
        if key not in have and not any(n in key for n in NEW_PARAMS):
            raise ConfigError(f"init_from={where!r} lacks param {'/'.join(key)}; only "
                              f"{', '.join(NEW_PARAMS)} may be new on top of a base")
    paths, treedef = jax.tree_util.tree_flatten_with_path(target)
    leaves = []
    for path, leaf in paths:
        key = tuple(str(getattr(k, "key", k)) for k in path)
        leaves.append(jax.device_put(have[key], leaf.sharding).astype(leaf.dtype) if key in have else leaf)
    return jax.tree_util.tree_unflatten(treedef, leaves)
