"""``edge-jax bench train-loop``: the whole training loop against a minimal loop over the same batches
and the same step.

``loop`` is :func:`edge_jax.train.loop.train_and_evaluate` into a new workdir: the input pipeline, the
feed onto the devices, logging (metrics.jsonl, TensorBoard, the progress bar), the checkpoint and
evaluation checks, the preemption watch; its seconds per step at steady state are the loop's own
(``step_time_s``: from the read of a step after the first two to the read of the last, evaluations
and checkpoint saves left out). ``minimal`` is the same compiled step (:func:`edge_jax.train.step.make_train_step`,
the same shardings and donation) dispatched back to back over the same batches, already on the
devices, timed over the same steps (from the end of the first log step past the warm-up to the end
of the last). Ratio = minimal / loop (goal >= 0.95: the loop costs the devices at most
5 %).

Two cases: ``compute``, the config given (the tiny preset: a step the devices take long over) and
``dispatch``, the same config shrunk to a step of about a millisecond on this machine's CPU, where
any host work between steps shows. Rounds alternate loop and minimal; medians and spreads printed.
"""
from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time

import jax

from edge_jax.bench.catalog import TRAIN_LOOP_CASES as CASES
from edge_jax.config import load_config
from edge_jax.data import make_train_iter
from edge_jax.models.inputs import with_host_inputs
from edge_jax.sharding import batch_sharding, on_mesh, process_block, to_global
from edge_jax.train.readback import StepClock
from edge_jax.train.setup import build
from edge_jax.train.state import create_train_state
from edge_jax.train.step import jit_train_step

# A step of about a millisecond on this machine's CPU: one narrow layer, short rows, one device.
DISPATCH_BOUND = {"model.d_model": 64, "model.n_layers": 1, "model.n_heads": 2, "model.n_kv_heads": 1,
                  "model.head_dim": 16, "model.d_ff": 128, "data.seq_len": 32, "data.batch_size": 4,
                  "mesh.data": 1, "mesh.fsdp": 1, "mesh.tensor": 1}
DISPATCH_STEPS = 10  # its rounds run ten times --steps: a millisecond a step needs more steps to time


def case_config(args, overrides: list, case: str):
    """The config of ``case``: ``--config`` with the overrides, ``--steps`` steps; ``dispatch`` shrinks the
    model and batch and runs :data:`DISPATCH_STEPS` times as many steps."""
    steps = args.steps * (DISPATCH_STEPS if case == "dispatch" else 1)
    extra = {"train.steps": steps, "train.log_every": args.log_every, "train.eval_every": steps,
             "train.ckpt_every": steps, "train.eval_batches": 1, "train.warmup_steps": 1}
    if case == "dispatch":
        extra.update(DISPATCH_BOUND)
    return load_config(args.config, [*overrides, *(f"{k}={v}" for k, v in extra.items())])


def loop_seconds(config) -> float:
    """The whole loop's seconds per step at steady state (a new workdir each call)."""
    from edge_jax.train.loop import train_and_evaluate
    with tempfile.TemporaryDirectory(prefix="edge-jax-bench-loop-") as workdir:
        with contextlib.redirect_stdout(io.StringIO()):  # the run's own lines; its progress bar is on stderr
            return train_and_evaluate(config, workdir)["step_time_s"]


class Minimal:
    """The same step over the same batches, on the devices before the clock starts, back to back."""

    def __init__(self, config):
        run = build(config)
        cfg = run.config
        sharding = batch_sharding(run.mesh)
        data = make_train_iter(cfg.data, run.tokenizer, cfg.seed, *process_block(sharding, cfg.data.batch_size))
        try:
            self.batches = [to_global(with_host_inputs(run.model.cfg, next(data)), sharding)
                            for _ in range(cfg.train.steps)]
        finally:
            data.close()
        self.state, shardings = create_train_state(run.model, run.tx, run.mesh, cfg.seed)
        step = jit_train_step(cfg.train, run.schedule, shardings, sharding)
        self.step = on_mesh(run.mesh, step.lower)(self.state, self.batches[0]).compile()

    def seconds(self, log_every: int) -> float:
        """Seconds per step over the steps the loop's ``step_time_s`` covers: from the end of the first
        log step past ``StepClock``'s warm-up (the loop's first read there) to the end of the last."""
        n = len(self.batches)
        start = -(-(StepClock.WARMUP + 1) // log_every) * log_every
        start = start if start < n - 1 else 1
        state = self.state
        for step, batch in enumerate(self.batches, 1):
            state, metrics = self.step(state, batch)
            if step == start:
                jax.block_until_ready(metrics)
                t0 = time.perf_counter()
        jax.block_until_ready(metrics)
        self.state = state
        return (time.perf_counter() - t0) / (n - start)


def run(args, overrides) -> str:
    cases = CASES if args.case == "both" else (args.case,)
    lines = [f"train-loop benchmark: {args.config} "
             f"({jax.device_count()} {jax.devices()[0].platform} device(s) present, "
             f"the dispatch case on one; log every {args.log_every}, {args.repeats} rounds alternating, "
             "median [min-max])"]
    for case in cases:
        config = case_config(args, overrides, case)
        minimal, samples = Minimal(config), {"loop": [], "minimal": []}
        loop_seconds(config)  # the data prepared and every cache warm before the first timed round
        minimal.seconds(args.log_every)
        for _ in range(args.repeats):
            samples["loop"].append(loop_seconds(config))
            samples["minimal"].append(minimal.seconds(args.log_every))
        d, m = config.data, config.model
        lines.append(f"  {case}: d_model {m.d_model} x {m.n_layers} layers, batch {d.batch_size} x seq {d.seq_len}, "
                     f"{config.train.steps} steps a round")
        for name, secs in samples.items():
            lines.append(f"    {name:>8}: {statistics.median(secs) * 1e3:8.3f} ms/step "
                         f"[{min(secs) * 1e3:.3f}-{max(secs) * 1e3:.3f}]")
        ratios = [b / a for a, b in zip(samples["loop"], samples["minimal"])]
        ratio = statistics.median(ratios)
        lines.append(f"    ratio minimal/loop = {ratio:.3f} [{min(ratios):.3f}-{max(ratios):.3f}] "
                     f"(goal >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'})")
    return "\n".join(lines)
