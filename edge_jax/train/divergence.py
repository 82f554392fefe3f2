"""What to say when training diverges: the last checkpoint that was still healthy, and a command that works.

Each checkpoint keeps the train loss of its step and the lowest train loss the run had reached by then
(:class:`LossWatch`). A checkpoint is healthy when its loss is finite and not far above that running
minimum (at most :data:`HEALTHY_FACTOR` times it): a checkpoint written after the loss had already
exploded is not one to go back to. Resuming the diverged workdir with a lower learning rate is refused
(a workdir holds one run), so the advice is a new workdir whose params start from the healthy step
(``init_from`` + ``init_step``) with half the learning rate.
"""
from __future__ import annotations

import math

HEALTHY_FACTOR = 1.5


class LossWatch:
    """The running minimum of the train loss over a run (carried across resumes through the checkpoints)."""

    def __init__(self, lowest: float = math.inf):
        self.lowest = lowest

    def update(self, loss: float) -> dict:
        """The metrics a checkpoint of this step keeps: ``loss`` and ``min_loss`` (the minimum so far)."""
        if math.isfinite(loss):
            self.lowest = min(self.lowest, loss)
        return {"loss": loss, "min_loss": self.lowest}


def healthy(metrics: dict) -> bool:
    loss, lowest = metrics.get("loss"), metrics.get("min_loss")
    if not isinstance(loss, (int, float)) or not isinstance(lowest, (int, float)):
        return False
    return math.isfinite(loss) and math.isfinite(lowest) and loss <= HEALTHY_FACTOR * lowest


def last_healthy(ckpt) -> tuple[int, dict] | None:
    """``(step, metrics)`` of the newest checkpoint whose saved loss was healthy, or None."""
    for step in sorted(ckpt.all_steps(), reverse=True):
        metrics = ckpt.metrics(step)
        if healthy(metrics):
            return step, metrics
    return None


def message(ckpt, workdir: str, step: int, loss: float, grad_norm: float, lr: float) -> str:
    """The one-line error for a non-finite loss or gradient norm at ``step``."""
    head = f"non-finite loss/grad norm ({loss}, {grad_norm}) at step {step}"
    lower = f"{lr / 2:.3g}"
    found = last_healthy(ckpt)
    if found is None:
        saved = "no checkpoint" if not ckpt.all_steps() else "no checkpoint with a healthy loss"
        return (f"{head}; {saved} to go back to: start over with a new --workdir and a lower train.lr (e.g. "
                f"--config.train.lr={lower}) or a longer train.warmup_steps")
    good, m = found
    return (f"{head}; the last healthy checkpoint is step {good} (loss {m['loss']:.4g}, lowest {m['min_loss']:.4g}); "
            f"to go on from it with a lower learning rate, rerun the same command with --workdir {workdir}-lr{lower} "
            f"--config.init_from={workdir} --config.init_step={good} --config.train.lr={lower} (its params carry "
            "over, the optimizer and data order start afresh)")
