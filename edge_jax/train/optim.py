"""Learning-rate schedules (cosine, WSD, WSDC, constant) and the AdamW optimizer.

All schedules warm up linearly from 0 to ``lr`` over ``warmup_steps``.
- cosine: cosine decay from ``lr`` to ``min_lr`` over the remaining steps.
- wsd: warm-up, stable at ``lr``, then the last ``decay_fraction`` of steps decay linearly to ``min_lr``.
- wsdc: warm-up, stable, linear decay over ``decay_fraction`` of the steps, then a constant tail
  at ``min_lr`` for the last ``tail_fraction`` of the steps.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from edge_jax.config import parse_lr_multipliers, trainable_pattern
from edge_jax.models.scan import STACKED


def make_schedule(t) -> optax.Schedule:
    total, warm, peak, floor = int(t.steps), int(t.warmup_steps), float(t.lr), float(t.min_lr)
    tail = int(round(t.tail_fraction * total)) if t.schedule == "wsdc" else 0
    decay = int(round(t.decay_fraction * total))
    decay_end = total - tail
    decay_start = max(warm, decay_end - decay)

    def schedule(step):
        s = jnp.asarray(step, jnp.float32)
        warmup = peak * jnp.minimum(1.0, (s + 1.0) / max(warm, 1))
        if t.schedule == "constant":
            return warmup if warm else jnp.full_like(s, peak)
        if t.schedule == "cosine":
            frac = jnp.clip((s - warm) / max(total - warm, 1), 0.0, 1.0)
            after = floor + 0.5 * (peak - floor) * (1.0 + jnp.cos(jnp.pi * frac))
        else:  # wsd / wsdc
            frac = jnp.clip((s - decay_start) / max(decay_end - decay_start, 1), 0.0, 1.0)
            after = peak + (floor - peak) * frac
        return jnp.where(s < warm, warmup, after)

    return schedule


def make_optimizer(t) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW with global-norm clipping; weight decay skips 1-D params and biases (norm scales; per layer under
    ``model.scan_layers``, whose paths read ``layers/attn/q_proj/kernel``).

    ``train.trainable`` (a regex over param paths like ``layers_0/attn/q_proj/kernel``) picks the
    params that train: the others get zero updates and stay out of the clipping norm. A param that
    trains takes ``train.lr`` times the multiplier of the first ``train.lr_multipliers`` entry
    (``REGEX=MULT``) whose pattern matches its path, on the same schedule shape. With every param
    training at 1x (the defaults) the chain is plain clipping + AdamW."""
    schedule = make_schedule(t)
    clip = optax.clip_by_global_norm(t.clip_norm) if t.clip_norm > 0 else optax.identity()

    def adamw(sched, decay):
        return optax.adamw(sched, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=decay, mask=_matrices_only)

    trainable, multipliers = t.trainable, tuple(t.lr_multipliers)
    trainable_pattern(trainable)  # a bad pattern fails here, before any param is built
    scales = [m for _, m in parse_lr_multipliers(multipliers)]
    if trainable == ALL and not multipliers:
        return optax.chain(clip, adamw(schedule, t.weight_decay)), schedule
    labels = functools.partial(param_labels, trainable=trainable, multipliers=multipliers)
    frozen = lambda params: jax.tree_util.tree_map(lambda x: x == FROZEN, labels(params))  # noqa: E731
    groups = {TRAIN: adamw(schedule, t.weight_decay), FROZEN: optax.set_to_zero()}
    groups.update({_group(i): adamw(_scaled(schedule, m), t.weight_decay) for i, m in enumerate(scales)})
    tx = optax.chain(optax.masked(optax.set_to_zero(), frozen), clip, optax.multi_transform(groups, labels))
    return tx, schedule


ALL = ".*"  # train.trainable's default: every param trains
TRAIN, FROZEN = "train", "frozen"  # the labels of params training at 1x and of frozen params


def _group(i: int) -> str:
    """The label of the params taking the multiplier of ``train.lr_multipliers[i]``."""
    return f"lr{i}"


def _scaled(schedule, m: float):
    return lambda step: m * schedule(step)


def param_path(path) -> str:
    """``layers_0/attn/q_proj/kernel``: the dict keys of a param's tree path (a box's ``value``
    attribute, as in the logically partitioned params at init, is not part of it)."""
    return "/".join(str(k.key) for k in path if hasattr(k, "key"))


def param_labels(params, trainable: str = ALL, multipliers=()):
    """Per param: ``"frozen"`` unless its path fully matches ``trainable``; else ``"lr<i>"`` for the
    first ``multipliers`` entry whose pattern fully matches it, ``"train"`` for the rest."""
    keep, mults = trainable_pattern(trainable), parse_lr_multipliers(multipliers)

    def label(path, _):
        name = param_path(path)
        if not keep.fullmatch(name):
            return FROZEN
        return next((_group(i) for i, (p, _) in enumerate(mults) if p.fullmatch(name)), TRAIN)

    return jax.tree_util.tree_map_with_path(label, params)


def trained_count(params, trainable: str = ALL) -> tuple[int, int]:
    """``(trained, total)`` parameter counts under ``trainable``."""
    sizes = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda p: int(p.size), params))
    kinds = jax.tree_util.tree_leaves(param_labels(params, trainable))
    return sum(n for n, k in zip(sizes, kinds) if k != FROZEN), sum(sizes)


def _matrices_only(params):
    """Weight decay's mask: params with 2+ axes, not counting the scanned layer axis (under
    ``model.scan_layers`` a norm scale ``layers/.../scale`` is [L, D] and still skips decay), and
    not a ``bias`` (the q/k/v biases are [H, K])."""
    def is_matrix(path, p):
        name = param_path(path)
        return p.ndim - (name.split("/")[0] == STACKED) > 1 and not name.endswith("/bias")
    return jax.tree_util.tree_map_with_path(is_matrix, params)


def group_names(opt_state) -> set[str]:
    """The labels of ``opt_state``'s optimizer groups that hold state (a checkpoint keeps only those)."""
    found: set[str] = set()
    _map_groups(opt_state, lambda groups: found.update(k for k, v in groups.items() if jax.tree_util.tree_leaves(v))
                or groups)
    return found


def rename_groups(opt_state, renames: dict[str, str]):
    """``opt_state`` with its optimizer groups relabelled ``old -> new`` (the group states unchanged)."""
    return _map_groups(opt_state, lambda groups: {renames.get(k, k): v for k, v in groups.items()})


def _map_groups(tree, fn):
    if isinstance(tree, optax.MultiTransformState):
        return tree._replace(inner_states=fn(dict(tree.inner_states)))
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_map_groups(x, fn) for x in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map_groups(x, fn) for x in tree)
    return tree
