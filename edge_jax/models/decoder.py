"""The decoder-only LM assembled from the config: Qwen3-style dense baseline, PLM, or EdgeInfinite.

Parameter tree (names the HF converters rely on)::

    embed/embedding [V, D]
    layers_i/attn_norm/scale, layers_i/attn/{q,k,v}_proj/kernel [D,H|G,K], o_proj/kernel [H,K,D],
    layers_i/attn/{q,k,v}_proj/bias [H|G,K] (model.qkv_bias), layers_i/attn/o_proj/bias [D] (model.o_bias),
    layers_i/attn/{q,k}_norm/scale [K], layers_i/ffn_norm/scale, layers_i/ffn/{gate,up,down}/kernel
    final_norm/scale [D], lm_head/kernel [D, V] (untied only), lm_head/bias [V] (model.lm_head_bias)

``model.norm=layernorm`` adds ``bias`` beside each ``scale`` of ``attn_norm``, ``ffn_norm`` and
``final_norm`` (:mod:`edge_jax.layers.norms`; QK-norm stays RMSNorm).

``attention=mla`` (PLM) replaces ``layers_i/attn`` by :class:`edge_jax.layers.attention.mla.MLAttention`
(``q_proj``, ``kv_down``, ``kv_norm``, ``k_rope_proj``, ``k_up``, ``v_up``, ``o_proj``); ``ffn``
picks the feed-forward kind (``relu2``, ``relu``, ``gelu`` have no ``gate``).
EdgeInfinite (``model.infini_hidden > 0``) adds ``layers_i/attn/memory_gate/{w1, b1, w2, b2, g}``
(:mod:`edge_jax.layers.infini.compressive`).
NPUMoE (``model.moe_experts > 0``) replaces ``layers_i/ffn`` by ``layers_i/moe/{router, gate, up, down}``
(:mod:`edge_jax.layers.moe.layer`; with ``moe_shared_d_ff`` also ``moe/shared/{gate, up, down}/kernel``) in
``moe_layers`` (default: all); ``moe_exec`` says how it executes.

Token-indexed memories (``model.memory``, :mod:`edge_jax.layers.token_memory`) add residual branches
at named sites of each block (their params under ``layers_i/...``, or at model level); a memory kind may
take host inputs, arrays computed outside the model (:mod:`edge_jax.models.inputs`), passed as one
dict ``host_inputs``. Each kind's module docstring lists its params.

``model.scan_layers`` builds the stack as one ``nn.scan`` over a :class:`ScannedBlock`: every
``layers_i/X`` above becomes ``layers/X`` with a leading layer axis (:mod:`edge_jax.models.scan`
converts). ``model.remat`` wraps the block in ``nn.remat`` with the policy it names.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.attention.kinds import ATTENTION_KINDS
from edge_jax.layers.ffn import FFN
from edge_jax.layers.moe.layer import MoE
from edge_jax.layers.moe.routers import RouterParams
from edge_jax.layers.norms import make_norm
from edge_jax.layers.token_memory.base import MEMORY_KINDS
from edge_jax.models.config import ModelConfig
from edge_jax.models.head import LMHead, vocab_logits
from edge_jax.models.scan import REMAT_POLICIES, STACKED
from edge_jax.sharding import constrain

__all__ = ["Block", "DecoderLM", "ModelConfig", "ScannedBlock"]


class Block(nn.Module):
    """One layer: attention and FFN (or MoE) residuals, plus the memory kind's residual branches
    at their sites (:mod:`edge_jax.layers.token_memory.base`). ``ctx`` carries what the branches need:
    tokens, the input embedding, the host inputs and what the memory kind prepared, with the
    per-layer entries (``attn_context``, the memory kind's ``per_layer``) already this layer's."""
    cfg: ModelConfig
    layer: int

    def _moe(self, common):
        """NPUMoE's MoE FFN; the saliency of a token is the L2 norm of its attention output (§3.2)."""
        c = self.cfg
        plans = c.moe_exec.plans
        plan = plans[c.moe_layer_ids().index(self.layer)] if plans else None
        return MoE(c.moe_experts, c.moe_top_k, c.moe_d_ff or c.d_ff, c.moe_renormalize, c.moe_aux_weight,
                   c.moe_exec, plan, kernels=c.kernels, router=c.moe_router, router_params=RouterParams.of(c),
                   shared_d_ff=c.moe_shared_d_ff, name="moe", **common)

    @nn.compact
    def __call__(self, h_BTD, positions_BT, ctx):
        return self.forward(h_BTD, positions_BT, ctx)

    def forward(self, h_BTD, positions_BT, ctx):
        """The layer (called inside the compact ``__call__`` of this class or of :class:`ScannedBlock`)."""
        c = self.cfg
        common = dict(init_std=c.init_std, dtype=c.dtype, param_dtype=c.param_dtype)
        branches = MEMORY_KINDS.get(c.memory).branches(c, self.layer)
        if "pre_attn" in branches:
            h_BTD = h_BTD + branches["pre_attn"](h_BTD, ctx)
        x = make_norm(c.norm, c.norm_eps, "norm", c.param_dtype, name="attn_norm")(h_BTD)
        attention = ATTENTION_KINDS.get(c.attention)(c, **common)
        a_BTD = attention(x, positions_BT, ctx.get("attn_context"))
        h_BTD = h_BTD + a_BTD
        if "attn" in branches:
            h_BTD = h_BTD + branches["attn"](x, ctx)
        if "post_attn" in branches:
            h_BTD = h_BTD + branches["post_attn"](h_BTD, ctx)
        x = make_norm(c.norm, c.norm_eps, "norm", c.param_dtype, name="ffn_norm")(h_BTD)
        if self.layer in c.moe_layer_ids():
            h_BTD = h_BTD + self._moe(common)(x, jnp.linalg.norm(a_BTD.astype(jnp.float32), axis=-1))
        else:
            h_BTD = h_BTD + FFN(c.ffn, c.d_ff, name="ffn", **common)(x, ctx.get("ffn_mask_ratio"))
        if "ffn" in branches:  # MeKi eq. 8: H' = F(H) + MeKi(H) + A, sharing the pre-FFN norm
            h_BTD = h_BTD + branches["ffn"](x, ctx)
        if "post_ffn" in branches:
            h_BTD = h_BTD + branches["post_ffn"](h_BTD, ctx)
        return h_BTD


class ScannedBlock(Block):
    """The block as ``nn.scan`` wants it: ``(h, this layer's inputs) -> (h, h or None)``; ``layer``
    is 0, which stands for every layer since :func:`~edge_jax.models.scan.scan_blocker` passed."""
    return_hidden: bool = False

    @nn.compact
    def __call__(self, h_BTD, layer_inputs, positions_BT, ctx):
        h_BTD = self.forward(h_BTD, positions_BT, {**ctx, **layer_inputs})
        h_BTD = constrain(h_BTD, ("batch", "seq", "embed"))
        return h_BTD, (h_BTD if self.return_hidden else None)


def remat_block(block_cls, cfg: ModelConfig, scanned: bool):
    """``block_cls`` wrapped in ``nn.remat`` with ``model.remat``'s policy (unchanged under "none").
    CSE prevention is needed in an unrolled loop only; under scan it would block optimisations."""
    if cfg.remat == "none":
        return block_cls
    return nn.remat(block_cls, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not scanned)


def per_layer_inputs(cfg: ModelConfig, ctx: dict) -> dict:
    """The ``ctx`` entries that hold one value per layer, layer axis first: the memory kind's
    ``per_layer`` arrays ``[B, T, L, ...]`` moved to ``[L, B, T, ...]``."""
    keys = MEMORY_KINDS.get(cfg.memory).per_layer
    return {k: jnp.moveaxis(ctx[k], 2, 0) for k in keys if ctx.get(k) is not None}


def layer_ctx(ctx: dict, stacked: dict, i: int) -> dict:
    """``ctx`` for layer ``i`` of the unrolled loop: the per-layer entries cut to layer ``i``."""
    contexts = ctx.get("attn_context")
    return {**ctx, **{k: v[i] for k, v in stacked.items()},
            "attn_context": None if contexts is None else contexts[i]}


class DecoderLM(nn.Module):
    """``apply(params, tokens_BT) -> logits_BTV`` (float32); ``return_hidden`` adds per-layer states."""
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens_BT, positions_BT=None, return_hidden: bool = False, host_inputs=None,
                 ffn_mask_ratio=None, attn_context=None, features_only: bool = False):
        """``host_inputs``: ``{name: array}``, the memory kind's inputs computed outside the model
        (:mod:`edge_jax.models.inputs`; only names its ``MemoryKind.accepts``), put in ``ctx``.
        ``ffn_mask_ratio``: zero the smallest fraction of every FFN's activations (sparsity analysis).
        ``attn_context``: one dict per layer, its explicit KV cache (and EdgeInfinite memory) for the
        attention layers (:mod:`edge_jax.infer.kv_state`, :mod:`edge_jax.layers.attention.cached`);
        pass ``positions_BT`` with it. ``features_only``: ``(h_BTD, w_DV)``, the final hidden states
        and the head's weight in the compute dtype, instead of the logits, and the head's bias ``b_V``
        (param dtype) third with ``model.lm_head_bias`` (:func:`edge_jax.models.head.split_features`)."""
        c = self.cfg
        memory = MEMORY_KINDS.get(c.memory)
        host = dict(host_inputs or {})
        for name in host:
            if name not in memory.accepts:
                raise ValueError(f"host input {name!r} is not an input of model.memory={c.memory!r} (it takes "
                                 f"{', '.join(memory.accepts) or 'none'}); pass it only to a model whose memory "
                                 "takes it")
        if positions_BT is None:
            positions_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1]), tokens_BT.shape)
        embed = nn.Embed(c.vocab_size, c.d_model, dtype=jnp.dtype(c.dtype), param_dtype=jnp.dtype(c.param_dtype),
                         embedding_init=nn.with_logical_partitioning(nn.initializers.normal(c.init_std),
                                                                     ("vocab", "embed")), name="embed")
        h = embed(tokens_BT)
        h = constrain(h, ("batch", "seq", "embed"))
        ctx = {"tokens": tokens_BT, "embedded": h, **host, "ffn_mask_ratio": ffn_mask_ratio,
               "attn_context": attn_context}
        if memory.prepare is not None:
            memory.prepare(c, ctx)
        stacked = per_layer_inputs(c, ctx)
        if c.scan_layers:
            h, hidden = self._scanned(h, positions_BT, ctx, stacked, return_hidden)
        else:
            hidden = []
            block_cls = remat_block(Block, c, scanned=False)
            for i in range(c.n_layers):
                h = block_cls(c, i, name=f"layers_{i}")(h, positions_BT, layer_ctx(ctx, stacked, i))
                h = constrain(h, ("batch", "seq", "embed"))
                hidden.append(h)
        h = make_norm(c.norm, c.norm_eps, "norm", c.param_dtype, name="final_norm")(h)
        w, b = (None, None)
        if c.lm_head_bias or not c.tie_embeddings:
            w, b = LMHead(c.d_model, c.vocab_size, c.init_std, c.param_dtype, untied=not c.tie_embeddings,
                          bias=c.lm_head_bias, name="lm_head")()
        w = embed.embedding.T if c.tie_embeddings else w
        h, w = h.astype(jnp.dtype(c.dtype)), w.astype(jnp.dtype(c.dtype))
        head = (w,) if b is None else (w, b)
        out = (h, *head) if features_only else vocab_logits(h, *head)
        return (out, hidden) if return_hidden else out

    def _scanned(self, h, positions_BT, ctx, stacked, return_hidden):
        """The stack as one scanned block (``model.scan_layers``): ``(h, per-layer hidden states)``.
        The per-layer inputs are scanned over, everything else in ``ctx`` is shared by every layer."""
        c = self.cfg
        if ctx.get("attn_context") is not None:
            raise ValueError("attn_context (explicit per-layer KV caches) needs the unrolled stack; decode "
                             "with model.scan_layers=False and params from edge_jax.models.scan.unstack_layers")
        shared = {k: v for k, v in ctx.items() if k not in stacked}
        scan = nn.scan(remat_block(ScannedBlock, c, scanned=True),
                       variable_axes={"params": 0, "losses": 0, "intermediates": 0},
                       split_rngs={"params": True}, in_axes=(0, nn.broadcast, nn.broadcast),
                       length=c.n_layers, metadata_params={nn.PARTITION_NAME: STACKED})
        h, hidden_L = scan(c, 0, return_hidden, name=STACKED)(h, stacked, positions_BT, shared)
        return h, ([hidden_L[i] for i in range(c.n_layers)] if return_hidden else None)
