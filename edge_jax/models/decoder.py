"""The decoder-only LM assembled from the config: Qwen3-style dense baseline, PLM, or EdgeInfinite.

Parameter tree (names the HF converters rely on)::

    embed/embedding [V, D]
    layers_i/attn_norm/scale, layers_i/attn/{q,k,v}_proj/kernel [D,H|G,K], o_proj/kernel [H,K,D],
    layers_i/attn/{q,k}_norm/scale [K], layers_i/ffn_norm/scale, layers_i/ffn/{gate,up,down}/kernel
    final_norm/scale [D], lm_head/kernel [D, V] (untied only)

``attention=mla`` (PLM) replaces ``layers_i/attn`` by :class:`edge_jax.layers.mla.MLAttention`
(``q_proj``, ``kv_down``, ``kv_norm``, ``k_rope_proj``, ``k_up``, ``v_up``, ``o_proj``); ``ffn``
picks the feed-forward kind (``relu2``, ``relu``, ``gelu`` have no ``gate``).
EdgeInfinite (``model.infini_hidden > 0``) adds ``layers_i/attn/memory_gate/{w1, b1, w2, b2, g}``
(:mod:`edge_jax.layers.infini`).
NPUMoE (``model.moe_experts > 0``) replaces ``layers_i/ffn`` by ``layers_i/moe/{router, gate, up, down}``
(:mod:`edge_jax.layers.moe.layer`) in ``moe_layers`` (default: all); ``moe_exec`` says how it executes.

Token-indexed memories (``model.memory``):
    meki    layers_i/meki/expert/{memory, proj_*, alpha, beta, norm}, layers_i/meki/{gate, out, out_norm}
            (folded: layers_i/meki/{table, gate, out, out_norm}); placed by ``meki_position``, with
            its own pre-norm ``layers_i/meki_norm`` when it sits after attention or after the FFN.
    ple     ple_inputs/... (model level), layers_i/ple/... added at the end of each layer.
    engram  layers_i/engram/... added to the residual before attention at ``engram_layers``;
            needs ``ngram_ids`` hashed on the host (:mod:`edge_jax.models.inputs`).
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.attention_kinds import ATTENTION_KINDS
from edge_jax.layers.ffn import FFN
from edge_jax.layers.memory.base import HOST_INPUTS, MEMORY_KINDS
from edge_jax.layers.moe.layer import MoE
from edge_jax.layers.norms import RMSNorm
from edge_jax.models.config import ModelConfig

__all__ = ["Block", "DecoderLM", "ModelConfig"]


class Block(nn.Module):
    """One layer: attention and FFN (or MoE) residuals, plus the memory kind's residual branches
    at their sites (:mod:`edge_jax.layers.memory.base`). ``ctx`` carries what the branches need:
    tokens, the input embedding, the host inputs and what the memory kind prepared."""
    cfg: ModelConfig
    layer: int

    def _moe(self, common):
        """NPUMoE's MoE FFN; the saliency of a token is the L2 norm of its attention output (§3.2)."""
        c = self.cfg
        plans = c.moe_exec.plans
        plan = plans[c.moe_layer_ids().index(self.layer)] if plans else None
        return MoE(c.moe_experts, c.moe_top_k, c.moe_d_ff or c.d_ff, c.moe_renormalize, c.moe_aux_weight,
                   c.moe_exec, plan, name="moe", **common)

    @nn.compact
    def __call__(self, h_BTD, positions_BT, ctx):
        c = self.cfg
        common = dict(init_std=c.init_std, dtype=c.dtype, param_dtype=c.param_dtype)
        branches = MEMORY_KINDS.get(c.memory).branches(c, self.layer)
        if "pre_attn" in branches:
            h_BTD = h_BTD + branches["pre_attn"](h_BTD, ctx)
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="attn_norm")(h_BTD)
        attention = ATTENTION_KINDS.get(c.attention)(c, **common)
        contexts = ctx.get("attn_context")
        a_BTD = attention(x, positions_BT, None if contexts is None else contexts[self.layer])
        h_BTD = h_BTD + a_BTD
        if "attn" in branches:
            h_BTD = h_BTD + branches["attn"](x, ctx)
        if "post_attn" in branches:
            h_BTD = h_BTD + branches["post_attn"](h_BTD, ctx)
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="ffn_norm")(h_BTD)
        if self.layer in c.moe_layer_ids():
            h_BTD = h_BTD + self._moe(common)(x, jnp.linalg.norm(a_BTD.astype(jnp.float32), axis=-1))
        else:
            h_BTD = h_BTD + FFN(c.ffn, c.d_ff, name="ffn", **common)(x, ctx.get("ffn_mask_ratio"))
        if "ffn" in branches:  # MeKi eq. 8: H' = F(H) + MeKi(H) + A, sharing the pre-FFN norm
            h_BTD = h_BTD + branches["ffn"](x, ctx)
        if "post_ffn" in branches:
            h_BTD = h_BTD + branches["post_ffn"](h_BTD, ctx)
        return h_BTD


class DecoderLM(nn.Module):
    """``apply(params, tokens_BT) -> logits_BTV`` (float32); ``return_hidden`` adds per-layer states."""
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens_BT, positions_BT=None, return_hidden: bool = False, ngram_ids=None,
                 meki_rows=None, ffn_mask_ratio=None, attn_context=None):
        """``ngram_ids`` [B, T, N]: host-hashed Engram ids (memory=engram only). ``meki_rows``
        [B, T, L, d_mem]: folded MeKi rows gathered outside the model (e.g. from host memory).
        ``ffn_mask_ratio``: zero the smallest fraction of every FFN's activations (sparsity analysis).
        ``attn_context``: one dict per layer, its explicit KV cache (and EdgeInfinite memory) for the
        attention layers (:mod:`edge_jax.infer.kv_state`, :mod:`edge_jax.layers.cache_attention`);
        pass ``positions_BT`` with it."""
        c = self.cfg
        memory = MEMORY_KINDS.get(c.memory)
        host = {"meki_rows": meki_rows, "ngram_ids": ngram_ids}
        for name in HOST_INPUTS:
            if host[name] is not None and name not in memory.accepts:
                raise ValueError(f"{name} is not an input of model.memory={c.memory!r}; pass it only to a "
                                 f"model whose memory takes it")
        if positions_BT is None:
            positions_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1]), tokens_BT.shape)
        embed = nn.Embed(c.vocab_size, c.d_model, dtype=jnp.dtype(c.dtype), param_dtype=jnp.dtype(c.param_dtype),
                         embedding_init=nn.with_logical_partitioning(nn.initializers.normal(c.init_std),
                                                                     ("vocab", "embed")), name="embed")
        h = embed(tokens_BT)
        h = nn.with_logical_constraint(h, ("batch", "seq", "embed"))
        ctx = {"tokens": tokens_BT, "embedded": h, **host, "ffn_mask_ratio": ffn_mask_ratio,
               "attn_context": attn_context}
        if memory.prepare is not None:
            memory.prepare(c, ctx)
        hidden = []
        for i in range(c.n_layers):
            h = Block(c, i, name=f"layers_{i}")(h, positions_BT, ctx)
            h = nn.with_logical_constraint(h, ("batch", "seq", "embed"))
            hidden.append(h)
        h = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="final_norm")(h)
        if c.tie_embeddings:
            logits = embed.attend(h)
        else:
            logits = nn.Dense(c.vocab_size, use_bias=False, dtype=jnp.dtype(c.dtype),
                              param_dtype=jnp.dtype(c.param_dtype), name="lm_head",
                              kernel_init=nn.with_logical_partitioning(nn.initializers.normal(c.init_std),
                                                                       ("embed", "vocab")))(h)
        logits = logits.astype(jnp.float32)
        return (logits, hidden) if return_hidden else logits
