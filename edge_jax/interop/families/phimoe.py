"""PhiMoE (``model_type`` phimoe: Phi-3.5-MoE, Phi-tiny-MoE): GQA with biases on q, k, v and the output,
LayerNorms with bias, a SparseMixer top-2 router over SwiGLU experts in every layer, a biased LM head.

Config -> ``model.*``: ``attention_bias`` -> ``qkv_bias`` and ``o_bias``; ``lm_head_bias``; ``norm=layernorm``
with ``rms_norm_eps`` as its eps (PhiMoE's name); ``num_local_experts`` -> ``moe_experts``,
``num_experts_per_tok`` (2 only) -> ``moe_top_k``, ``intermediate_size`` -> ``d_ff`` (the experts' width),
``moe_router=sparsemixer`` with ``router_jitter_noise`` -> ``moe_jitter_eps`` (its mask threshold, also at
inference); RoPE ``default`` or ``longrope`` (``short_mscale == long_mscale`` -> the cos/sin factor).
Absent keys take ``PhimoeConfig``'s defaults. Not converted: ``input_jitter_noise`` and the Gumbel
sampling of SparseMixer, which transformers applies in training mode only (inference is unaffected;
export writes ``input_jitter_noise=0``), and the load-balancing loss settings. A ``sliding_window``
shorter than ``max_position_embeddings`` is refused (Phi-3.5-MoE's equals it, so never slides).

LongRoPE follows Microsoft's reference code: the long factors once the longest position + 1 passes
``original_max_position_embeddings``. transformers 5's ``PhimoeRotaryEmbedding`` keeps the short factors
there (it calls the init function without the length), so long inputs differ from it, not from the reference.

Tensors (checkpoint layout, as ``save_pretrained`` writes it): ``block_sparse_moe.gate.weight`` [E, D]
-> ``moe/router``; ``block_sparse_moe.experts.{e}.{w1, w3, w2}.weight`` (gate, up, down) -> ``moe/{gate, up,
down}`` stacked; ``{input_layernorm, post_attention_layernorm, norm}.{weight, bias}`` -> ``{attn_norm,
ffn_norm, final_norm}/{scale, bias}``; ``lm_head.bias`` -> ``lm_head/bias``.
"""
from __future__ import annotations

from edge_jax.interop import layouts
from edge_jax.interop.families.common import decoder_hf_config, decoder_keys, refuse, refuse_model, silu_only
from edge_jax.interop.family import FAMILIES, Family, Unsupported
from edge_jax.layers.rope import Rope

DEFAULTS = {"rope_theta": 1_000_000.0, "rms_norm_eps": 1e-5, "num_local_experts": 16, "num_experts_per_tok": 2,
            "router_jitter_noise": 0.01, "max_position_embeddings": 131072}  # PhimoeConfig's


def _no_sliding_window(c: dict) -> None:
    window, longest = c.get("sliding_window"), int(c["max_position_embeddings"])
    if window is not None and int(window) < longest:
        raise Unsupported(f"unsupported setting sliding_window={window} < max_position_embeddings={longest}; "
                          "edge_jax has full causal attention only")


def model_keys(c: dict) -> dict:
    c = {**DEFAULTS, **{k: v for k, v in c.items() if v is not None}}
    silu_only(c)
    _no_sliding_window(c)
    refuse(c, "num_experts_per_tok", (2,), "SparseMixer routes every token to two experts")
    keys = decoder_keys(c)
    if keys.get("rope_scaling", "default") not in ("default", "longrope"):
        raise Unsupported(f"unsupported rope scaling rope_type={keys['rope_scaling']!r} for PhiMoE (its short/long "
                          "mscale replaces the scaling's own factor); edge_jax takes 'default' or 'longrope' here")
    bias = bool(c.get("attention_bias", False))
    return {**keys, "norm_eps": float(c["rms_norm_eps"]), "norm": "layernorm", "qk_norm": False,
            "qkv_bias": bias, "o_bias": bias, "lm_head_bias": bool(c.get("lm_head_bias", False)),
            "moe_experts": int(c["num_local_experts"]), "moe_top_k": 2, "moe_router": "sparsemixer",
            "moe_jitter_eps": float(c["router_jitter_noise"])}


def _check_exportable(cfg) -> None:
    refuse_model(cfg, "PhiMoE", norm="layernorm", qkv_bias=cfg.qkv_bias, o_bias=cfg.o_bias,
                 lm_head_bias=cfg.lm_head_bias, qk_norm=False, moe_router="sparsemixer", moe_top_k=2,
                 moe_routed_scale=1.0, moe_shared_d_ff=0)
    if cfg.qkv_bias != cfg.o_bias:
        raise Unsupported(f"model.qkv_bias={cfg.qkv_bias} with model.o_bias={cfg.o_bias} has no PhiMoE form "
                          "(one attention_bias for all four projections)")
    if cfg.moe_experts <= 0 or len(cfg.moe_layer_ids()) != cfg.n_layers or cfg.moe_d_ff not in (0, cfg.d_ff):
        raise Unsupported(f"model.moe_experts={cfg.moe_experts}, moe_layers={tuple(cfg.moe_layers)}, moe_d_ff="
                          f"{cfg.moe_d_ff} has no PhiMoE form (experts of width d_ff in every layer)")
    if cfg.rope_scaling not in ("default", "longrope"):
        raise Unsupported(f"model.rope_scaling={cfg.rope_scaling!r} has no PhiMoE form ('default' or 'longrope')")


def hf_config(cfg) -> dict:
    _check_exportable(cfg)
    out = {**decoder_hf_config(cfg, "phimoe", "PhimoeForCausalLM"), "attention_bias": cfg.qkv_bias,
           "lm_head_bias": cfg.lm_head_bias, "num_local_experts": cfg.moe_experts, "num_experts_per_tok": 2,
           "router_jitter_noise": cfg.moe_jitter_eps, "input_jitter_noise": 0.0, "sliding_window": None}
    rope = Rope.of(cfg)
    if rope.scaling == "longrope":
        mscale = rope.cos_sin_factor
        out["rope_parameters"] = {**out["rope_parameters"], "short_mscale": mscale, "long_mscale": mscale}
        out["max_position_embeddings"] = int(round(rope.original_max_len * rope.factor))
    return out


def sparse_moe(cfg, i: int) -> list:
    """Layer ``i``'s router and stacked experts (``w1`` gate, ``w3`` up, ``w2`` down)."""
    hf, ours = layouts.HF_LAYER.format(i=i) + "block_sparse_moe.", f"layers_{i}/moe"
    E, D, F = cfg.moe_experts, cfg.d_model, cfg.moe_d_ff or cfg.d_ff
    return [layouts.router(f"{ours}/router", hf + "gate.weight", E, D),
            *layouts.experts(ours, hf + "experts", E, D, F, names=("w1", "w3", "w2"))]


def tensors(cfg) -> list:
    return layouts.decoder(cfg, layouts.gqa_attention, sparse_moe)


FAMILIES.register("phimoe", Family(("phimoe",), "PhimoeForCausalLM", model_keys, hf_config, tensors))
