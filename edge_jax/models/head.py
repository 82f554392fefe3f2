"""The LM head: final hidden states to vocabulary logits, whole or a chunk of positions at a time.

A vocabulary as large as Qwen3's (151,680) makes the float32 logits the largest activation of a
train step: 2.3 GiB per 4096-token sequence, held two or three times over in the backward pass.
:func:`chunked_token_losses` computes the cross-entropy ``chunk`` positions at a time under
``jax.checkpoint``, so one chunk's logits are alive at once, forward and backward, for one extra
head matmul; :func:`token_losses` over :func:`vocab_logits` is its reference.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from edge_jax.sharding import constrain


class HeadKernel(nn.Module):
    """The untied head's weight ``kernel`` [D, V] (``lm_head/kernel``, the HF converters' name)."""
    d_model: int
    vocab_size: int
    init_std: float
    param_dtype: str

    @nn.compact
    def __call__(self):
        init = nn.with_logical_partitioning(nn.initializers.normal(self.init_std), ("embed", "vocab"))
        return self.param("kernel", init, (self.d_model, self.vocab_size), jnp.dtype(self.param_dtype))


def vocab_logits(h_BTD, w_DV):
    """``h @ W`` in the dtype both arrive in (the model's compute dtype), float32 out, its rows
    pinned to the batch axes and its vocabulary to ``tensor`` on the active mesh."""
    return constrain(jnp.dot(h_BTD, w_DV).astype(jnp.float32), ("batch", "seq", "vocab"))


def token_losses(logits_BTV, targets_BT):
    """Cross-entropy of every position [B, T], in float32."""
    return optax.softmax_cross_entropy_with_integer_labels(logits_BTV.astype(jnp.float32), targets_BT)


def chunked_token_losses(h_BTD, w_DV, targets_BT, chunk: int):
    """``token_losses(vocab_logits(h, w), targets)`` with the logits made ``chunk`` positions at
    a time and rematerialised in the backward pass. ``chunk`` must divide T."""
    B, T, D = h_BTD.shape
    if chunk <= 0 or T % chunk:
        raise ValueError(f"loss chunk {chunk} does not divide the sequence length {T}; pick a divisor "
                         f"(train.loss_chunk)")
    O = T // chunk  # chunks of ``chunk`` positions each
    h_OBTD = h_BTD.reshape(B, O, chunk, D).swapaxes(0, 1)
    t_OBT = targets_BT.reshape(B, O, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one(h_BTD, t_BT):
        return token_losses(vocab_logits(h_BTD, w_DV), t_BT)

    losses_OBT = jax.lax.map(lambda a: one(*a), (h_OBTD, t_OBT))
    return losses_OBT.swapaxes(0, 1).reshape(B, T)
