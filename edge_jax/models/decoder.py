"""The decoder-only LM assembled from the config: Qwen3-style dense baseline.

Parameter tree (names the HF converter relies on)::

    embed/embedding [V, D]
    layers_i/attn_norm/scale, layers_i/attn/{q,k,v}_proj/kernel [D,H|G,K], o_proj/kernel [H,K,D],
    layers_i/attn/{q,k}_norm/scale [K], layers_i/ffn_norm/scale, layers_i/ffn/{gate,up,down}/kernel
    final_norm/scale [D], lm_head/kernel [D, V] (untied only)
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.attention import GQAttention
from edge_jax.layers.ffn import make_ffn
from edge_jax.layers.norms import RMSNorm


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
    dtype: str = "float32"
    param_dtype: str = "float32"
    init_std: float = 0.02

    @classmethod
    def from_config(cls, model_cfg) -> "ModelConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(model_cfg).items() if k in fields})


class Block(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, h_BTD, positions_BT):
        c = self.cfg
        common = dict(init_std=c.init_std, dtype=c.dtype, param_dtype=c.param_dtype)
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="attn_norm")(h_BTD)
        h_BTD = h_BTD + GQAttention(c.n_heads, c.n_kv_heads, c.head_dim, c.rope_theta, c.qk_norm,
                                    c.norm_eps, name="attn", **common)(x, positions_BT)
        x = RMSNorm(c.norm_eps, "norm", c.param_dtype, name="ffn_norm")(h_BTD)
        return h_BTD + make_ffn(c.ffn, c.d_ff, name="ffn", **common)(x)


class DecoderLM(nn.Module):
    """``apply(params, tokens_BT) -> logits_BTV`` (float32); ``return_hidden`` adds per-layer states."""
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens_BT, positions_BT=None, return_hidden: bool = False):
        c = self.cfg
        if positions_BT is None:
            positions_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1]), tokens_BT.shape)
        embed = nn.Embed(c.vocab_size, c.d_model, dtype=jnp.dtype(c.dtype), param_dtype=jnp.dtype(c.param_dtype),
                         embedding_init=nn.with_logical_partitioning(nn.initializers.normal(c.init_std),
                                                                     ("vocab", "embed")), name="embed")
        h = embed(tokens_BT)
        h = nn.with_logical_constraint(h, ("batch", "seq", "embed"))
        hidden = []
        for i in range(c.n_layers):
            h = Block(c, name=f"layers_{i}")(h, positions_BT)
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
