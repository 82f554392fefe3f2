"""The LM head: final hidden states to vocabulary logits, whole or a chunk of positions at a time.

A vocabulary as large as Qwen3's (151,680) makes the float32 logits the largest activation of a
train step: 2.3 GiB per 4096-token sequence, held two or three times over in the backward pass.
:func:`chunked_token_losses` computes the cross-entropy ``chunk`` positions at a time under
``jax.checkpoint``, so one chunk's logits are alive at once, forward and backward, for one extra
head matmul; :func:`token_losses` over :func:`vocab_logits` is its reference.

``model.lm_head_bias`` (Phi-3.5-MoE) adds ``lm_head/bias`` [V] to the logits, tied head or not; the
functions here take it as ``b_V`` (None without), and ``DecoderLM(..., features_only=True)`` hands
it out as a third element (:func:`split_features`).
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from edge_jax.registry import SECTIONS, Section
from edge_jax.sharding import constrain


class LMHead(nn.Module):
    """The head's own params (``lm_head/...``, the HF converters' names): ``kernel`` [D, V] when
    ``untied``, ``bias`` [V] (zeros at init) with ``bias``. Returns ``(kernel or None, bias or None)``."""
    d_model: int
    vocab_size: int
    init_std: float
    param_dtype: str
    untied: bool = True
    bias: bool = False

    @nn.compact
    def __call__(self):
        pdt = jnp.dtype(self.param_dtype)
        w = b = None
        if self.untied:
            init = nn.with_logical_partitioning(nn.initializers.normal(self.init_std), ("embed", "vocab"))
            w = self.param("kernel", init, (self.d_model, self.vocab_size), pdt)
        if self.bias:
            b = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                           (self.vocab_size,), pdt)
        return w, b


def split_features(out):
    """``(h_BTD, w_DV, b_V or None)`` of a ``features_only`` model output (``(h, w)`` or ``(h, w, b)``)."""
    h, w, *b = out
    return h, w, (b[0] if b else None)


def vocab_logits(h_BTD, w_DV, b_V=None):
    """``h @ W (+ b)``: the product in the dtype both arrive in (the model's compute dtype), float32
    out, the bias added in float32; rows pinned to the batch axes and the vocabulary to ``tensor`` on
    the active mesh."""
    logits = jnp.dot(h_BTD, w_DV).astype(jnp.float32)
    if b_V is not None:
        logits = logits + b_V.astype(jnp.float32)
    return constrain(logits, ("batch", "seq", "vocab"))


def token_losses(logits_BTV, targets_BT):
    """Cross-entropy of every position [B, T], in float32."""
    return optax.softmax_cross_entropy_with_integer_labels(logits_BTV.astype(jnp.float32), targets_BT)


def chunked_token_losses(h_BTD, w_DV, targets_BT, chunk: int, b_V=None):
    """``token_losses(vocab_logits(h, w, b), targets)`` with the logits made ``chunk`` positions at
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
        return token_losses(vocab_logits(h_BTD, w_DV, b_V), t_BT)

    losses_OBT = jax.lax.map(lambda a: one(*a), (h_OBTD, t_OBT))
    return losses_OBT.swapaxes(0, 1).reshape(B, T)


@dataclasses.dataclass(frozen=True)
class HeadKeys:
    """``model.lm_head_bias``: a learned bias on the vocabulary logits (``lm_head/bias`` [V])."""
    lm_head_bias: bool = False


SECTIONS.register("head", Section("model", HeadKeys))
