"""PLE: Gemma-3n-style per-layer embeddings, the first baseline of MeKi Table 2.

Model level (:class:`PLEInputs`), once per forward pass, for token ``x_t`` with input embedding
``E[x_t]`` (d_model ``D``), ``L`` layers and per-layer width ``M = d_ple``::

    tok_t  = M**0.5 * T[x_t]                            T: [V, L*M], the ROM table ("vocab", "mem")
    ctx_t  = RMSNorm_M( D**-0.5 * E[x_t] @ W_ctx )      W_ctx: [D, L*M] ("embed", "mem")
    ple_t  = 2**-0.5 * (tok_t + ctx_t)                  reshaped to [L, M]; layer l reads ple_t[l]

* ``T`` scaled by ``sqrt(M)`` (Gemma 3n's scaled per-layer embedding, ``embed_scale = M**0.5``),
  initialised ``normal(init_std)`` like every table in the model.
* ``W_ctx`` scaled by ``D**-0.5`` (Gemma 3n's ``per_layer_model_projection`` scale).
* ``RMSNorm_M``: RMS over the M features of each layer's slice, with one learned scale [M] shared by
  all layers (Gemma 3n's ``per_layer_projection_norm``); the token part is not normalised.
* The sum is scaled by ``2**-0.5`` (Gemma 3n's ``per_layer_input_scale``) so the two unit-scale
  halves add to unit scale.

Layer level (:class:`PLEBlock`), at the end of layer ``l`` on its output ``h`` (the decoder adds the
result to the residual; Gemma 3n adds it to the AltUp streams, which this model does not have)::

    y = RMSNorm_D( W_proj ( gelu_tanh(W_gate h) * ple_t[l] ) )     W_gate: D->M, W_proj: M->D

no biases, learned RMSNorm scale (Gemma 3n's ``post_per_layer_input_norm``), ``h`` un-normalised as
in Gemma 3n. At inference only ``T`` is read from ROM (one row of ``L*M`` values per token); the
rest (``W_ctx``, the gates and projections) lives in RAM.

Params: ``ple_inputs/{table, ctx_proj, ctx_norm}`` (model level), ``layers_i/ple/{gate, proj, out_norm}``.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.ffn import dense
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.token_memory.base import MEMORY_KINDS, MemoryKind
from edge_jax.sharding import take_rows


class PLEInputs(nn.Module):
    """``(tokens [B, T], embedded [B, T, D]) -> per-layer inputs [B, T, n_layers, d_ple]``."""
    vocab_size: int
    n_layers: int
    d_ple: int
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, tokens_BT, embedded_BTD):
        L, M, dt = self.n_layers, self.d_ple, jnp.dtype(self.dtype)
        table = self.param("table", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                 ("vocab", "mem")),
                           (self.vocab_size, L * M), jnp.dtype(self.param_dtype))
        tok = take_rows(table, tokens_BT).astype(dt) * jnp.asarray(M ** 0.5, dt)
        x = embedded_BTD.astype(dt)
        ctx = dense(L * M, ("embed", "mem"), "ctx_proj", self.init_std, self.dtype, self.param_dtype)(x)
        ctx = ctx * jnp.asarray(x.shape[-1] ** -0.5, dt)
        ctx = RMSNorm(self.norm_eps, "mem", self.param_dtype, name="ctx_norm")(ctx.reshape(*ctx.shape[:-1], L, M))
        tok = tok.reshape(*tok.shape[:-1], L, M)
        return ((tok + ctx) * jnp.asarray(2 ** -0.5, dt)).astype(dt)


class PLEBlock(nn.Module):
    """``(h [B, T, D], ple [B, T, d_ple]) -> delta [B, T, D]`` added to the residual after layer l."""
    d_ple: int
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, h_BTD, ple_BTM):
        a = (self.init_std, self.dtype, self.param_dtype)
        x = h_BTD.astype(jnp.dtype(self.dtype))
        gate = nn.gelu(dense(self.d_ple, ("embed", "mem"), "gate", *a)(x), approximate=True)
        out = dense(x.shape[-1], ("mem", "embed"), "proj", *a)(gate * ple_BTM.astype(gate.dtype))
        return RMSNorm(self.norm_eps, "norm", self.param_dtype, name="out_norm")(out)


def _prepare(cfg, ctx: dict) -> None:
    """The per-layer inputs, computed once per forward at model level (``ple_inputs``)."""
    ctx["ple"] = PLEInputs(cfg.vocab_size, cfg.n_layers, cfg.d_mem, cfg.norm_eps, init_std=cfg.init_std,
                           dtype=cfg.dtype, param_dtype=cfg.param_dtype, name="ple_inputs")(
        ctx["tokens"], ctx["embedded"])


def _branch(cfg, layer: int):
    def apply(h_BTD, ctx):
        return PLEBlock(cfg.d_mem, cfg.norm_eps, cfg.init_std, cfg.dtype, cfg.param_dtype, name="ple")(
            h_BTD, ctx["ple"])  # this layer's slice [B, T, d_ple] (MemoryKind.per_layer)
    return {"post_ffn": apply}


MEMORY_KINDS.register("ple", MemoryKind(_branch, prepare=_prepare, per_layer=("ple",)))
