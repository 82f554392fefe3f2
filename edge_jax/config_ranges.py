"""The ranges of the ``train.*`` numbers that have one, checked by :func:`edge_jax.config.validate`: one line
naming the key, its value and the range, e.g. ``train.b1=1.5 must be in [0, 1)``."""
from __future__ import annotations

import math

from edge_jax.errors import ConfigError

# The range of each number of train.* that has one (beyond the checks of validate): key -> (low, low included,
# high, high included); None: no bound on that side. Every value must also be finite.
TRAIN_RANGES = {
    "lr": (0, False, None, False), "warmup_steps": (0, True, None, False), "min_lr": (0, True, None, False),
    "b1": (0, True, 1, False), "b2": (0, True, 1, False), "eps": (0, False, None, False),
    "weight_decay": (0, True, None, False), "clip_norm": (0, True, None, False),
    "decay_fraction": (0, True, 1, False), "tail_fraction": (0, True, 1, False),
    "eval_batches": (0, True, None, False), "qa_questions": (-1, True, None, False),
}
RANGE_HINTS = {"clip_norm": " (0: no clipping)", "eval_batches": " (0: the whole split)",
               "qa_questions": " (-1: every question, 0: none)"}


def range_text(low, low_in: bool, high, high_in: bool) -> str:
    """``[0, 1)``, ``> 0``, ``>= 0``: how a range reads in an error."""
    if high is None:
        return f"{'>=' if low_in else '>'} {low:g}"
    return f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"


def check_train_ranges(t) -> None:
    """Every ``train.*`` number of :data:`TRAIN_RANGES` in its range: ``train.b1=1.5 must be in [0, 1)``."""
    for key, (low, low_in, high, high_in) in TRAIN_RANGES.items():
        val = t[key]
        inside = math.isfinite(val) and (val >= low if low_in else val > low) and (
            high is None or (val <= high if high_in else val < high))
        if not inside:
            where = range_text(low, low_in, high, high_in)
            what = ("a finite number " if not math.isfinite(val) else "") + ("in " if high is not None else "")
            raise ConfigError(f"train.{key}={val} must be {what}{where}{RANGE_HINTS.get(key, '')}")
