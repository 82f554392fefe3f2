"""Learning-rate schedules (cosine, WSD, WSDC, constant) and the AdamW optimizer.

All schedules warm up linearly from 0 to ``lr`` over ``warmup_steps``.
- cosine: cosine decay from ``lr`` to ``min_lr`` over the remaining steps.
- wsd: warm-up, stable at ``lr``, then the last ``decay_fraction`` of steps decay linearly to ``min_lr``.
- wsdc (PLM): warm-up, stable, linear decay over ``decay_fraction`` of the steps, then a constant tail
  at ``min_lr`` for the last ``tail_fraction`` of the steps.
"""
from __future__ import annotations

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
    """AdamW with global-norm clipping; weight decay skips 1-D params (norm scales)."""
    schedule = make_schedule(t)
    tx = optax.chain(
        optax.clip_by_global_norm(t.clip_norm) if t.clip_norm > 0 else optax.identity(),
        optax.adamw(schedule, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay, mask=_matrices_only),
    )
    return tx, schedule


def _matrices_only(params):
    return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)
