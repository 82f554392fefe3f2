"""Start a run from another run's params (``init_from=<workdir>``), e.g. a module trained on a frozen base.

The source workdir's own ``config.json`` rebuilds its model, the params of its latest checkpoint
are restored, and every param the new model shares with it is copied over. Params only the new
model has keep their initialisation when they train on top of a frozen base (they match a
``train.trainable`` pattern other than the default ``.*``); anything else that differs (a missing
or extra param, another shape, another tokenizer) is a one-line error naming the fix.
"""
from __future__ import annotations

import os
import sys

import jax
import ml_collections

from edge_jax.config import ConfigError
from edge_jax.models.scan import like_layout
from edge_jax.train import checksums
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.optim import ALL, param_path, trainable_pattern
from edge_jax.train.setup import build
from edge_jax.train.state import abstract_train_state
from edge_jax.train.workdir import load_workdir_config
from edge_jax.utils.storage import epath


def _flat(tree) -> dict:
    return {param_path(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def restore_params(workdir: str, step: int = 0, one_device: bool = False):
    """``(params, config)`` of the newest intact checkpoint in a training workdir (a damaged newer one is
    named on stderr and left in place), or of its checkpoint at ``step`` (> 0), which must be intact.
    ``one_device``: onto this host's first device, whatever mesh the run trained on (a conversion)."""
    ckpt_dir = os.path.join(workdir, "checkpoints")
    if not epath(ckpt_dir).is_dir():
        raise ConfigError(f"init_from={workdir!r} has no checkpoints; train the base there first "
                          "(edge-jax train --workdir ...)")
    config = load_workdir_config(workdir)
    rebuilt = ml_collections.ConfigDict(config.to_dict())
    if one_device:
        rebuilt.mesh.update(data=1, fsdp=1, tensor=1)
        rebuilt.data.batch_size = rebuilt.train.grad_accum  # any micro-batch divides one device
    run = build(rebuilt, jax.devices()[:1] if one_device else None)
    ckpt = Checkpointer(ckpt_dir, 1, 1)
    abstract = abstract_train_state(run.model, run.tx, run.mesh)[0].params
    try:
        if step:
            if step not in ckpt.all_steps():
                raise ConfigError(f"init_from={workdir!r} has no checkpoint at init_step={step}; its steps: "
                                  f"{', '.join(map(str, ckpt.all_steps())) or 'none'}")
            why = ckpt.check(step)
            if why not in (None, checksums.UNVERIFIED):
                raise ConfigError(f"init_from={workdir!r} step {step} is damaged ({why}); pick another init_step")
            found = step, ckpt.restore_params(step, abstract)
        else:
            found = ckpt.restore_newest(lambda s: ckpt.restore_params(s, abstract), move=False,
                                        warn=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        ckpt.close()
    if found is None:
        raise ConfigError(f"init_from={workdir!r} has no finished checkpoint; let its training finish first")
    return found[1], config


def merge_params(target, source, where: str, trainable: str = ALL):
    """``target`` with every leaf ``source`` also has replaced by the source's value; a param only
    ``target`` has must train on a frozen base (match ``trainable``, which is not the default).
    A base with the other layer layout (``model.scan_layers``) is stacked or unstacked to ``target``'s."""
    have, want = _flat(like_layout(source, target)), _flat(target)
    extra = [k for k in have if k not in want]
    if extra:
        raise ConfigError(f"init_from={where!r} has param {extra[0]} that this model lacks; the base and "
                          "this config describe different models (check model.* against the base's config.json)")
    keep = trainable_pattern(trainable)
    for key, leaf in want.items():
        if key in have and have[key].shape != leaf.shape:
            raise ConfigError(f"init_from={where!r}: param {key} has shape {have[key].shape}, this model "
                              f"{leaf.shape}; use the base's model.* sizes")
        if key not in have and (trainable == ALL or not keep.fullmatch(key)):
            raise ConfigError(f"init_from={where!r} lacks param {key}; only params that train on the frozen "
                              f"base may be new (train.trainable={trainable!r} must match them and not every param)")
    paths, treedef = jax.tree_util.tree_flatten_with_path(target)
    leaves = []
    for path, leaf in paths:
        key = param_path(path)
        leaves.append(jax.device_put(have[key], leaf.sharding).astype(leaf.dtype) if key in have else leaf)
    return jax.tree_util.tree_unflatten(treedef, leaves)
