"""Metrics sinks: JSONL in the workdir, TensorBoard events, a console progress bar."""
from __future__ import annotations

import json
import math
import os

from tqdm import tqdm

from edge_jax.train.tb_events import EventWriter
from edge_jax.utils.atomic import write_text_atomic


def read_jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a kill: drop it
                    continue
    return out


class MetricsWriter:
    """Appends ``{"step", "kind", ...}`` lines; on resume, drops lines past the restored step."""

    def __init__(self, workdir: str, total_steps: int, start_step: int, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        if enabled:
            kept = [r for r in read_jsonl(self.path) if r.get("step", 0) <= start_step]
            write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))
            self._tb = EventWriter(os.path.join(workdir, "tb"), purge_step=start_step + 1)
        self._bar = tqdm(total=total_steps, initial=start_step, disable=not enabled, dynamic_ncols=True,
                         mininterval=1.0 if os.isatty(2) else 30.0)

    def write(self, step: int, kind: str, metrics: dict) -> None:
        if not self.enabled:
            return
        record = {"step": int(step), "kind": kind}
        record.update({k: float(v) for k, v in metrics.items()})
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        self._tb.scalars(int(step), {f"{kind}/{k}": float(v) for k, v in metrics.items() if math.isfinite(float(v))})
        if kind == "eval":
            self._bar.write(f"step {step}: " + ", ".join(f"{k} {float(v):.4f}" for k, v in metrics.items()))

    def progress(self, step: int, metrics: dict) -> None:
        self._bar.set_postfix({k: f"{float(v):.4g}" for k, v in metrics.items()}, refresh=False)
        self._bar.update(step - self._bar.n)

    def close(self) -> None:
        self._bar.close()
        if self.enabled:
            self._tb.close()
