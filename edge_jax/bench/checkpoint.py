"""``edge-jax bench checkpoint``: what verified, asynchronous checkpoints cost a run.

Three ratios, each from rounds that alternate between the two sides (median and min..max of the rounds):

- **checksums on save**: seconds from ``save`` to the committed step (``wait``), with the checksums
  written at commit against plain orbax (goal <= 1.1);
- **checksums on restore**: verifying a step's checksums and restoring its train state, against
  restoring it alone (goal <= 1.1);
- **async save**: seconds per train step over rounds of ``--steps`` (20) steps that save a checkpoint every
  ``--every`` steps in the background, as the training loop does, against the same steps with no
  checkpoint (goal <= 1.05); a third side saves synchronously, to show what the background write buys.
  The save started at a round's last step is waited for outside the timing.

The model is the training config's (``configs/lm.py:size=tiny`` by default; ``--config.*`` overrides
apply); the checkpoints go to a temporary directory under ``--dir`` that is removed afterwards.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import jax
import numpy as np

from edge_jax.config import load_config
from edge_jax.sharding import batch_sharding
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.setup import build
from edge_jax.train.state import abstract_train_state, create_train_state
from edge_jax.train.step import make_train_step
from edge_jax.utils.args import output_dir

DATA_STATE = {"stream_rows": [[0, 1, 2, 3, 4]]}  # what a data iterator's state looks like in size


def _rounds(sides: dict, repeats: int) -> dict:
    """``sides``: name -> zero-arg callable returning its measured seconds; alternated ``repeats`` times
    after one untimed warm-up call each. Every round's seconds, per side."""
    for fn in sides.values():
        fn()
    out = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            out[name].append(fn())
    return out


def _line(label: str, base: str, samples: dict, goal: float, unit: str = "s") -> list[str]:
    """Median and spread of both sides and the ratio of their medians against ``goal``."""
    lines = []
    for name, s in samples.items():
        lines.append(f"    {name:>22}: median {statistics.median(s):9.4f} {unit}  "
                     f"(min {min(s):.4f} .. max {max(s):.4f})")
    other = next(n for n in samples if n != base)
    ratio = statistics.median(samples[other]) / statistics.median(samples[base])
    lines.append(f"    ratio {other} / {base} = {ratio:.3f} (goal <= {goal}: {'met' if ratio <= goal else 'NOT met'})")
    return [f"  {label}"] + lines


def run(args, overrides) -> str:
    run_ = build(load_config(args.config, overrides))
    cfg = run_.config
    sharding = batch_sharding(run_.mesh)
    B, T = cfg.data.batch_size, cfg.data.seq_len
    tokens = np.random.default_rng(0).integers(1, run_.tokenizer.vocab_size, (B, T + 1), dtype=np.int32)
    batch = {"inputs": jax.device_put(tokens[:, :-1], sharding), "targets": jax.device_put(tokens[:, 1:], sharding)}
    state, shardings = create_train_state(run_.model, run_.tx, run_.mesh, cfg.seed)
    abstract = abstract_train_state(run_.model, run_.tx, run_.mesh)[0]
    step_fn = jax.jit(make_train_step(cfg.train.grad_accum, run_.schedule, cfg.train.loss_chunk), donate_argnums=0,
                      in_shardings=(shardings, sharding), out_shardings=(shardings, None))
    root = tempfile.mkdtemp(prefix="edge_jax-bench-ckpt-", dir=str(output_dir(args.dir, "--dir")))
    box = {"state": state}
    ckpts = {name: Checkpointer(os.path.join(root, name), 1000, 1, verified=verified, background=background)
             for name, verified, background in (("plain", False, True), ("checksums", True, True),
                                                ("sync", True, False))}
    counter = {"step": 0}
    try:
        def save_time(name):
            def go():
                counter["step"] += 1
                state = box["state"].replace(step=jax.numpy.asarray(counter["step"], box["state"].step.dtype))
                t0 = time.perf_counter()  # the state carries its step, as the loop's do (a restore checks it)
                ckpts[name].save(counter["step"], state, DATA_STATE, force=True, metrics={"loss": 1.0})
                ckpts[name].wait()
                return time.perf_counter() - t0
            return go

        saves = _rounds({"plain orbax": save_time("plain"), "with checksums": save_time("checksums")}, args.repeats)
        ckpt, last = ckpts["checksums"], ckpts["checksums"].latest_step()

        def restore_plain():
            t0 = time.perf_counter()
            jax.block_until_ready(ckpt.restore(last, abstract)[0])
            return time.perf_counter() - t0

        def restore_checked():
            t0 = time.perf_counter()
            assert ckpt.check(last) is None, f"step {last} does not verify"
            jax.block_until_ready(ckpt.restore(last, abstract)[0])
            return time.perf_counter() - t0

        restores = _rounds({"restore": restore_plain, "verify + restore": restore_checked}, args.repeats)

        def training(saver):
            def go():
                t0 = time.perf_counter()
                for i in range(1, args.steps + 1):
                    box["state"], metrics = step_fn(box["state"], batch)
                    float(metrics["loss"])                       # the loop reads the loss every step
                    if saver is not None and i % args.every == 0:
                        counter["step"] += 1
                        ckpts[saver].save(counter["step"], box["state"], DATA_STATE, force=True,
                                          metrics={"loss": 1.0})
                seconds = (time.perf_counter() - t0) / args.steps
                if saver is not None:
                    ckpts[saver].wait()
                return seconds
            return go

        steps = _rounds({"no checkpoint": training(None), f"async every {args.every}": training("checksums"),
                         f"sync every {args.every}": training("sync")}, args.repeats)
    finally:
        for c in ckpts.values():
            c.close()
        shutil.rmtree(root, ignore_errors=True)
    size = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(abstract))
    lines = [f"checkpoint benchmark: {args.config} (train state {size / 2**20:.1f} MiB, batch {B} x seq {T}, "
             f"{jax.devices()[0].platform}, {args.repeats} rounds each, sides alternated)"]
    lines += _line("save to committed step", "plain orbax", saves, 1.1)
    lines += _line("restore", "restore", restores, 1.1)
    async_only = {k: v for k, v in steps.items() if not k.startswith("sync")}
    lines += _line(f"train step, {args.steps} steps per round", "no checkpoint", async_only, 1.05, unit="s/step")
    sync = steps[f"sync every {args.every}"]
    lines.append(f"    (synchronous saves instead: median {statistics.median(sync):.4f} s/step, ratio "
                 f"{statistics.median(sync) / statistics.median(steps['no checkpoint']):.3f})")
    return "\n".join(lines)
