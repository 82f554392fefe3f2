"""Pure train and eval steps. Build them once per (model, optimizer) and jit with donation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from edge_jax.models.head import chunked_token_losses, split_features, token_losses
from edge_jax.models.inputs import model_kwargs


def batch_token_losses(params, apply_fn, batch, loss_chunk: int = 0, mutable=False):
    """``(losses_BT, variables)`` of the model on ``batch``: the whole logits at once, or with
    ``loss_chunk`` > 0 the head and cross-entropy ``loss_chunk`` positions at a time
    (:func:`edge_jax.models.head.chunked_token_losses`: same values, a chunk's logits in memory)."""
    out, variables = apply_fn({"params": params}, batch["inputs"], **model_kwargs(batch),
                              features_only=loss_chunk > 0, mutable=mutable or [])
    if loss_chunk > 0:
        h_BTD, w_DV, b_V = split_features(out)
        return chunked_token_losses(h_BTD, w_DV, batch["targets"], loss_chunk, b_V), variables
    return token_losses(out, batch["targets"]), variables


def auxiliary_loss(variables) -> jax.Array:
    """The sum of the losses layers sow into ``losses`` (the MoE load-balancing loss), 0 if none."""
    leaves = jax.tree_util.tree_leaves(variables.get("losses", {}))
    return sum((jnp.sum(x) for x in leaves), jnp.zeros((), jnp.float32))


def make_train_step(grad_accum: int, schedule, loss_chunk: int = 0):
    """``train_step(state, batch) -> (state, metrics)``; the batch is split into ``grad_accum``
    micro-batches; ``loss_chunk`` > 0 computes the loss that many positions at a time."""

    def loss_fn(params, apply_fn, micro):
        losses, aux = batch_token_losses(params, apply_fn, micro, loss_chunk, mutable=["losses"])
        return jnp.mean(losses) + auxiliary_loss(aux)

    def train_step(state, batch):
        grad_fn = jax.value_and_grad(loss_fn)
        if grad_accum == 1:
            loss, grads = grad_fn(state.params, state.apply_fn, batch)
        else:
            micro = jax.tree_util.tree_map(
                lambda x: x.reshape(grad_accum, x.shape[0] // grad_accum, *x.shape[1:]), batch)

            def body(carry, mb):
                loss_sum, grad_sum = carry
                loss, grads = grad_fn(state.params, state.apply_fn, mb)
                return (loss_sum + loss, jax.tree_util.tree_map(jnp.add, grad_sum, grads)), None

            zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
            (loss, grads), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), micro)
            loss = loss / grad_accum
            grads = jax.tree_util.tree_map(lambda g: g / grad_accum, grads)
        metrics = {"loss": loss, "grad_norm": optax.tree.norm(grads), "lr": schedule(state.step)}
        return state.apply_gradients(grads=grads), metrics

    return train_step


def jit_train_step(train_cfg, schedule, state_shardings, batch_sharding):
    """:func:`make_train_step` for ``train_cfg`` (``config.train``) jitted as training runs it: the
    state donated, in and out in ``state_shardings``, the batch in ``batch_sharding``."""
    step = make_train_step(train_cfg.grad_accum, schedule, train_cfg.loss_chunk)
    return jax.jit(step, donate_argnums=0, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, None))


def make_eval_step(apply_fn):
    """``eval_step(params, batch) -> {"loss_sum", "tokens"}`` over the batch's masked targets (whole
    logits: without a backward pass they are held once, and eval batches may be any length)."""

    def eval_step(params, batch):
        losses, _ = batch_token_losses(params, apply_fn, batch)
        mask = batch.get("mask")
        mask = jnp.ones(batch["targets"].shape, jnp.float32) if mask is None else mask
        return {"loss_sum": jnp.sum(losses * mask), "tokens": jnp.sum(mask)}

    return eval_step
