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

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.attention import GQAttention
from edge_jax.layers.memory.engram import Engram
from edge_jax.layers.ffn import FFN
from edge_jax.layers.infini_attention import InfiniSpec
from edge_jax.layers.memory.meki import MeKi
from edge_jax.layers.mla import MLAttention
from edge_jax.layers.moe.layer import MoE
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.memory.ple import PLEBlock, PLEInputs
from edge_jax.layers.moe.plan import MoEExec


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    rope_theta: float = 500_000.0
    qk_norm: bool = True
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    ffn: str = "swiglu"
    attention: str = "gqa"
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    d_rope: int = 0
    mla_absorb: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    init_std: float = 0.02
    memory: str = "none"
    d_mem: int = 0
    meki_static: bool = True
    meki_dynamic: bool = True
    meki_projection: str = "swiglu"
    meki_fusion: str = "add_sigmoid"
    meki_position: str = "parallel_ffn"
    meki_folded: bool = False
    engram_layers: tuple = (1,)
    engram_orders: tuple = (2, 3)
    engram_heads: int = 4
    engram_table_size: int = 4099
    engram_kernel: int = 4
    infini_hidden: int = 0
    infini_gate_init: float = 0.0
    infini_sink: int = 0
    infini_window: int = 0
    infini_segment: int = 0
    infini_update: str = "linear"
    infini_eps: float = 1e-6
    infini_keep_sink: bool = True
    infini_keep_window: bool = True
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_d_ff: int = 0
    moe_renormalize: bool = False
    moe_layers: tuple = ()
    moe_aux_weight: float = 0.0
    moe_exec: MoEExec = MoEExec()

    def moe_layer_ids(self) -> tuple[int, ...]:
        """The layers whose FFN is a MoE (``moe_layers``, or every layer when it is empty)."""
        if self.moe_experts <= 0:
            return ()
        return tuple(self.moe_layers) if self.moe_layers else tuple(range(self.n_layers))

    def infini_spec(self) -> InfiniSpec | None:
        """EdgeInfinite's layer settings, or None for a model without the memory gate. The keep
        switches (Table 2) drop the sink or window tokens by setting their count to zero."""
        if self.infini_hidden <= 0:
            return None
        return InfiniSpec(self.infini_hidden, self.infini_gate_init, self.infini_sink if self.infini_keep_sink else 0,
                          self.infini_window if self.infini_keep_window else 0, self.infini_segment,
                          self.infini_update, self.infini_eps)

    @classmethod
    def from_config(cls, model_cfg) -> "ModelConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in dict(model_cfg).items() if k in fields})


class Block(nn.Module):
    """One layer. ``ctx`` carries what token memories need: tokens, the input embedding, host
    gathered MeKi rows, this layer's PLE input and the Engram n-gram ids."""
    cfg: ModelConfig
    layer: int

    def _meki(self, x_BTD, ctx):
        c = self.cfg
        rows = ctx.get("meki_rows")
        return MeKi(c.vocab_size, c.d_mem, c.meki_static, c.meki_dynamic, c.meki_projection, c.meki_fusion,
                    c.meki_folded, c.norm_eps, c.init_std, c.dtype, c.param_dtype, name="meki")(
            x_BTD, ctx["tokens"], ctx["embedded"], None if rows is None else rows[:, :, self.layer])

    def _meki_after(self, h_BTD, ctx):
        c = self.cfg
        return h_BTD + self._meki(RMSNorm(c.norm_eps, "norm", c.param_dtype, name="meki_norm")(h_BTD), ctx)

    def _attention(self, common):
        c = self.cfg
        if c.attention == "mla":
            return MLAttention(c.n_heads, c.head_dim, c.d_rope, c.kv_lora_rank, c.q_lora_rank, c.rope_theta,
                               c.mla_absorb, c.norm_eps, name="attn", **common)
        return GQAttention(c.n_heads, c.n_kv_heads, c.head_dim, c.rope_theta, c.qk_norm, c.norm_eps,
                           infini=c.infini_spec(), name="attn", **common)

    def _moe(self, common):
        """NPUMoE's MoE FFN; the saliency of a token is the L2 norm of its attention output (§3.2)."""
        c = self.cfg
        plans = c.moe_exec.plans
        plan = plans[c.moe_layer_ids().index(self.layer)] if plans else None
        return MoE(c.moe_experts, c.moe_top_k, c.moe_d_ff or c.d_ff, c.moe_renormalize, c.moe_aux_weight,
                   c.moe_exec, plan, name="moe", **common)

    @nn.compact
    def __call__(self, h_BTD, positions_BT, ctx, decode: bool = False):
        c = self.cfg
        common = dict(init_std=c.init_std, dtype=c.dtype, param_dtype=c.param_dtype)
        meki = c.meki_position if c.memory == "meki" else None
        if c.memory == "engram" and self.layer in c.engram_layers:
            h_BTD = h_BTD + Engram(c.vocab_size, c.engram_orders, c.engram_heads, c.engram_table_size, c.d_mem,
                                   c.engram_kernel, c.norm_eps, name="engram", **common)(h_BTD, ctx["ngram_ids"])
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="attn_norm")(h_BTD)
        contexts = ctx.get("attn_context")
        if contexts is None:
            a_BTD = self._attention(common)(x, positions_BT, decode)
        else:
            if c.attention != "gqa":
                raise ValueError("an explicit attention context (long-context inference) needs model.attention=gqa")
            a_BTD = self._attention(common)(x, positions_BT, decode, contexts[self.layer])
        h_BTD = h_BTD + a_BTD
        if meki == "parallel_attn":
            h_BTD = h_BTD + self._meki(x, ctx)
        elif meki == "after_attn":
            h_BTD = self._meki_after(h_BTD, ctx)
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="ffn_norm")(h_BTD)
        if self.layer in c.moe_layer_ids():
            h_BTD = h_BTD + self._moe(common)(x, jnp.linalg.norm(a_BTD.astype(jnp.float32), axis=-1))
        else:
            h_BTD = h_BTD + FFN(c.ffn, c.d_ff, name="ffn", **common)(x, ctx.get("ffn_mask_ratio"))
        if meki == "parallel_ffn":  # eq. 8: H' = F(H) + MeKi(H) + A, sharing the pre-FFN norm
            h_BTD = h_BTD + self._meki(x, ctx)
        elif meki == "after_ffn":
            h_BTD = self._meki_after(h_BTD, ctx)
        if c.memory == "ple":
            h_BTD = h_BTD + PLEBlock(c.d_mem, c.norm_eps, name="ple", **common)(h_BTD, ctx["ple"][:, :, self.layer])
        return h_BTD


class DecoderLM(nn.Module):
    """``apply(params, tokens_BT) -> logits_BTV`` (float32); ``return_hidden`` adds per-layer states."""
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens_BT, positions_BT=None, return_hidden: bool = False, ngram_ids=None,
                 meki_rows=None, decode: bool = False, ffn_mask_ratio=None, attn_context=None):
        """``ngram_ids`` [B, T, N]: host-hashed Engram ids (memory=engram only). ``meki_rows``
        [B, T, L, d_mem]: folded MeKi rows gathered outside the model (e.g. from host memory).
        ``ffn_mask_ratio``: zero the smallest fraction of every FFN's activations (sparsity analysis).
        ``attn_context``: one dict per layer, an explicit KV cache (and EdgeInfinite memory) for the
        attention layers (:func:`edge_jax.layers.infini_attention.context_attention`); pass
        ``positions_BT`` with it."""
        c = self.cfg
        if c.memory == "engram" and ngram_ids is None:
            raise ValueError("memory=engram needs ngram_ids; build them with edge_jax.models.inputs.host_inputs")
        if meki_rows is not None and not (c.memory == "meki" and c.meki_folded):
            raise ValueError("meki_rows only apply to a folded MeKi model; fold it with fold_meki first")
        if positions_BT is None:
            positions_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1]), tokens_BT.shape)
        embed = nn.Embed(c.vocab_size, c.d_model, dtype=jnp.dtype(c.dtype), param_dtype=jnp.dtype(c.param_dtype),
                         embedding_init=nn.with_logical_partitioning(nn.initializers.normal(c.init_std),
                                                                     ("vocab", "embed")), name="embed")
        h = embed(tokens_BT)
        h = nn.with_logical_constraint(h, ("batch", "seq", "embed"))
        ctx = {"tokens": tokens_BT, "embedded": h, "meki_rows": meki_rows, "ngram_ids": ngram_ids,
               "ffn_mask_ratio": ffn_mask_ratio, "attn_context": attn_context}
        if c.memory == "ple":
            ctx["ple"] = PLEInputs(c.vocab_size, c.n_layers, c.d_mem, c.norm_eps, init_std=c.init_std, dtype=c.dtype,
                                   param_dtype=c.param_dtype, name="ple_inputs")(tokens_BT, h)
        hidden = []
        for i in range(c.n_layers):
            h = Block(c, i, name=f"layers_{i}")(h, positions_BT, ctx, decode)
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
