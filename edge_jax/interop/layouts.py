"""The tensor maps the HF decoder families share (Llama layout: ``model.embed_tokens``,
``model.layers.{i}.{input_layernorm, self_attn, post_attention_layernorm, mlp}``, ``model.norm``,
``lm_head``), built from our :class:`~edge_jax.models.config.ModelConfig`. A family composes them and
adds what is its own (:mod:`edge_jax.interop.families`).

Our param names: :mod:`edge_jax.models.decoder`'s docstring; biases are ``bias`` beside ``kernel``
(``scale`` beside ``bias`` for a LayerNorm), the MoE's params are ``moe/{router, gate, up, down}`` and
its shared experts ``moe/shared/{gate, up, down}/kernel``.
"""
from __future__ import annotations

from edge_jax.interop.family import Tensor, copy, linear, stacked_linear

HF_LAYER = "model.layers.{i}."


def norm(ours: str, hf: str, width: int, cfg) -> list[Tensor]:
    """A norm's scale (``.weight``) and, for a LayerNorm, its bias (``.bias``)."""
    out = [copy(f"{ours}/scale", f"{hf}.weight", (width,))]
    if cfg.norm == "layernorm":
        out.append(copy(f"{ours}/bias", f"{hf}.bias", (width,)))
    return out


def gqa_attention(cfg, i: int) -> list[Tensor]:
    """``self_attn.{q,k,v,o}_proj`` (biases with ``model.qkv_bias`` / ``model.o_bias``) and QK-norm."""
    D, H, G, K = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    ours, hf = f"layers_{i}/attn/", HF_LAYER.format(i=i) + "self_attn."
    out = [linear(ours + "q_proj/kernel", hf + "q_proj.weight", (H, K), (D,)),
           linear(ours + "k_proj/kernel", hf + "k_proj.weight", (G, K), (D,)),
           linear(ours + "v_proj/kernel", hf + "v_proj.weight", (G, K), (D,)),
           linear(ours + "o_proj/kernel", hf + "o_proj.weight", (D,), (H, K))]
    if cfg.qkv_bias:
        out += [Tensor(ours + f"{p}_proj/bias", (hf + f"{p}_proj.bias",), (n * K,),
                       lambda xs, n=n: xs[0].reshape(n, K), lambda a, n=n: [a.reshape(n * K)])
                for p, n in (("q", H), ("k", G), ("v", G))]
    if cfg.o_bias:
        out.append(copy(ours + "o_proj/bias", hf + "o_proj.bias", (D,)))
    if cfg.qk_norm:
        out += [copy(ours + "q_norm/scale", hf + "q_norm.weight", (K,)),
                copy(ours + "k_norm/scale", hf + "k_norm.weight", (K,))]
    return out


def swiglu_mlp(ours: str, hf: str, d_model: int, d_ff: int) -> list[Tensor]:
    """``{hf}.{gate,up,down}_proj`` <-> ``{ours}/{gate,up,down}/kernel``."""
    return [linear(f"{ours}/gate/kernel", f"{hf}.gate_proj.weight", (d_ff,), (d_model,)),
            linear(f"{ours}/up/kernel", f"{hf}.up_proj.weight", (d_ff,), (d_model,)),
            linear(f"{ours}/down/kernel", f"{hf}.down_proj.weight", (d_model,), (d_ff,))]


def experts(ours: str, hf: str, n_experts: int, d_model: int, d_ff: int,
            names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> list[Tensor]:
    """Per-expert HF linears ``{hf}.{e}.{name}.weight`` <-> our stacked ``{ours}/{gate, up, down}``."""
    g, u, d = names
    each = [f"{hf}.{e}." for e in range(n_experts)]
    return [stacked_linear(f"{ours}/gate", [p + f"{g}.weight" for p in each], d_ff, d_model),
            stacked_linear(f"{ours}/up", [p + f"{u}.weight" for p in each], d_ff, d_model),
            stacked_linear(f"{ours}/down", [p + f"{d}.weight" for p in each], d_model, d_ff)]


def router(ours: str, hf: str, n_experts: int, d_model: int) -> Tensor:
    """The router's HF ``[E, D]`` weight <-> our ``[D, E]``."""
    return linear(ours, hf, (n_experts,), (d_model,))


def decoder(cfg, attention, ffn) -> list[Tensor]:
    """The whole Llama-layout map: ``attention(cfg, i)`` and ``ffn(cfg, i)`` give each layer's own
    entries; embedding, the two norms per layer, the final norm and the head are common."""
    V, D = cfg.vocab_size, cfg.d_model
    out = [copy("embed/embedding", "model.embed_tokens.weight", (V, D))]
    for i in range(cfg.n_layers):
        hf = HF_LAYER.format(i=i)
        out += norm(f"layers_{i}/attn_norm", hf + "input_layernorm", D, cfg)
        out += attention(cfg, i)
        out += norm(f"layers_{i}/ffn_norm", hf + "post_attention_layernorm", D, cfg)
        out += ffn(cfg, i)
    out += norm("final_norm", "model.norm", D, cfg)
    if not cfg.tie_embeddings:
        out.append(linear("lm_head/kernel", "lm_head.weight", (V,), (D,)))
    if cfg.lm_head_bias:
        out.append(copy("lm_head/bias", "lm_head.bias", (V,)))
    return out


def dense_ffn(cfg, i: int) -> list[Tensor]:
    """A dense SwiGLU layer (``mlp.{gate,up,down}_proj``)."""
    return swiglu_mlp(f"layers_{i}/ffn", HF_LAYER.format(i=i) + "mlp", cfg.d_model, cfg.d_ff)
