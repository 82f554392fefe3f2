"""Metrics sinks: JSONL in the workdir, TensorBoard events, a console progress bar."""
from __future__ import annotations

import json
import math
import os

from tqdm import tqdm

from edge_jax.train.tb_events import EventWriter
from edge_jax.utils.append_log import AppendLog
from edge_jax.utils.storage import epath


def read_jsonl(path: str) -> list[dict]:
    """The records of a JSON-lines file, local or in a bucket ([] when it is absent)."""
    path = epath(path)
    if not path.exists():
        return []
    out = []
    with path.open() as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a kill: drop it
                    continue
    return out


class MetricsWriter:
    """Appends ``{"step", "kind", ...}`` lines; on resume, drops lines past the restored step. In a bucket the
    lines are published every 30 s and by :meth:`flush` (the loop calls it before each checkpoint, so the lines
    of every step a resumed run keeps are saved with it)."""

    def __init__(self, workdir: str, total_steps: int, start_step: int, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        if enabled:
            kept = [r for r in read_jsonl(self.path) if r.get("step", 0) <= start_step]
            self._log = AppendLog(self.path, "".join(json.dumps(r) + "\n" for r in kept).encode())
            self._tb = EventWriter(os.path.join(workdir, "tb"), purge_step=start_step + 1)
        self._bar = tqdm(total=total_steps, initial=start_step, disable=not enabled, dynamic_ncols=True,
                         mininterval=1.0 if os.isatty(2) else 30.0)

    def write(self, step: int, kind: str, metrics: dict) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "kind": kind}
        record.update({k: float(v) for k, v in metrics.items()})
        self._log.append((json.dumps(record) + "\n").encode())
        self._tb.scalars(int(step), {f"{kind}/{k}": float(v) for k, v in metrics.items() if math.isfinite(float(v))})
        if kind == "eval":
            self._bar.write(f"step {step}: " + ", ".join(f"{k} {float(v):.4f}" for k, v in metrics.items()))

    def progress(self, step: int, metrics: dict) -> None:
        self._bar.set_postfix({k: f"{float(v):.4g}" for k, v in metrics.items()}, refresh=False)
        self._bar.update(step - self._bar.n)

    def flush(self) -> None:
        """Everything written so far readable (a no-op on a local disk, where each line is at once)."""
        if self.enabled:
            self._log.flush()
            self._tb.flush()

    def close(self) -> None:
        self._bar.close()
        if self.enabled:
            self._log.close()
            self._tb.close()
