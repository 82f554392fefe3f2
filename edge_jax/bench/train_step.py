"""``edge-jax bench train-step``: our jitted train step against a minimal hand-written JAX step.

Both train the same model from the same initial parameters on the same random batch. The minimal
step is ``value_and_grad`` + ``optax.adamw`` + ``apply_updates`` and nothing else (no clipping, no
schedule, no metrics, no sharding annotations). Ratio = minimal time / our time (goal >= 0.95).
"""
from __future__ import annotations

import jax
import numpy as np
import optax

from edge_jax.config import load_config
from edge_jax.sharding import batch_sharding
from edge_jax.train.setup import build
from edge_jax.train.state import create_train_state
from edge_jax.train.step import jit_train_step, token_losses
from edge_jax.utils.timing import time_interleaved


def minimal_step_fn(apply_fn, t):
    opt = optax.adamw(t.lr, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay)

    def step(params, opt_state, inputs, targets):
        def loss_fn(p):
            return token_losses(apply_fn({"params": p}, inputs), targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return opt, jax.jit(step, donate_argnums=(0, 1))


def run(args, overrides) -> str:
    config = load_config(args.config, overrides)
    run = build(config)
    cfg = run.config
    B, T = cfg.data.batch_size, cfg.data.seq_len
    tokens = np.random.default_rng(0).integers(0, run.tokenizer.vocab_size, (B, T + 1), dtype=np.int32)
    sharding = batch_sharding(run.mesh)
    batch = {"inputs": jax.device_put(tokens[:, :-1], sharding), "targets": jax.device_put(tokens[:, 1:], sharding)}

    state, shardings = create_train_state(run.model, run.tx, run.mesh, cfg.seed)
    ours_step = jit_train_step(cfg.train, run.schedule, shardings, sharding)
    opt, min_step = minimal_step_fn(run.model.apply, cfg.train)
    params = jax.tree_util.tree_map(lambda x: x.copy(), state.params)
    box = {"state": state, "params": params, "opt": opt.init(params)}

    def ours():
        for _ in range(args.steps):
            box["state"], metrics = ours_step(box["state"], batch)
        return metrics["loss"]

    def minimal():
        for _ in range(args.steps):
            box["params"], box["opt"], loss = min_step(box["params"], box["opt"], batch["inputs"], batch["targets"])
        return loss

    secs = time_interleaved({"ours": ours, "minimal": minimal}, args.repeats, args.steps)
    ratio = secs["minimal"] / secs["ours"]
    tokens_per_step = B * T
    lines = [f"train-step benchmark: {args.config} (batch {B} x seq {T}, {len(run.mesh.devices.flat)} "
             f"{jax.devices()[0].platform} device(s), {args.repeats} rounds x {args.steps} steps, median)"]
    for name in ("ours", "minimal"):
        lines.append(f"  {name:>8}: {secs[name] * 1e3:8.2f} ms/step  {tokens_per_step / secs[name]:10.0f} tokens/s")
    lines.append(f"  ratio minimal/ours = {ratio:.3f} (goal >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'})")
    return "\n".join(lines)
