"""Learning-rate schedules (cosine, WSD, WSDC, constant) and the AdamW optimizer.

All schedules warm up linearly from 0 to ``lr`` over ``warmup_steps``.
- cosine: cosine decay from ``lr`` to ``min_lr`` over the remaining steps.
- wsd: warm-up, stable at ``lr``, then the last ``decay_fraction`` of steps decay linearly to ``min_lr``.
- wsdc (PLM): warm-up, stable, linear decay over ``decay_fraction`` of the steps, then a constant tail
  at ``min_lr`` for the last ``tail_fraction`` of the steps.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax


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
    """AdamW with global-norm clipping; weight decay skips 1-D params (norm scales).

    ``train.trainable=memory_gate`` zeroes the updates of everything but EdgeInfinite's memory-gating
    modules (and leaves them out of the clipping norm); the gate logits ``g`` take ``train.gate_lr``
    (when set) on the same schedule shape, without weight decay."""
    schedule = make_schedule(t)
    clip = optax.clip_by_global_norm(t.clip_norm) if t.clip_norm > 0 else optax.identity()

    def adamw(sched, decay):
        return optax.adamw(sched, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=decay, mask=_matrices_only)

    if t.trainable == "all" and not t.gate_lr:
        return optax.chain(clip, adamw(schedule, t.weight_decay)), schedule
    scale = (t.gate_lr / t.lr) if t.gate_lr else 1.0
    labels = functools.partial(param_labels, trainable=t.trainable)
    frozen = lambda params: jax.tree_util.tree_map(lambda x: x == "frozen", labels(params))  # noqa: E731
    tx = optax.chain(
        optax.masked(optax.set_to_zero(), frozen),
        clip,
        optax.multi_transform({"train": adamw(schedule, t.weight_decay),
                               "gate": adamw(lambda step: scale * schedule(step), 0.0),
                               "frozen": optax.set_to_zero()}, labels),
    )
    return tx, schedule


def param_labels(params, trainable: str = "all"):
    """``"gate"`` for EdgeInfinite's gate logits, ``"train"`` for the other trained params,
    ``"frozen"`` for the base model under ``trainable=memory_gate``."""
    def label(path, _):
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        if "memory_gate" in names:
            return "gate" if "g" in names else "train"
        return "frozen" if trainable == "memory_gate" else "train"

    return jax.tree_util.tree_map_with_path(label, params)


def trained_count(params, trainable: str = "all") -> tuple[int, int]:
    """``(trained, total)`` parameter counts under ``trainable``."""
    sizes = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda p: int(p.size), params))
    kinds = jax.tree_util.tree_leaves(param_labels(params, trainable))
    return sum(n for n, k in zip(sizes, kinds) if k != "frozen"), sum(sizes)


def _matrices_only(params):
    return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)
