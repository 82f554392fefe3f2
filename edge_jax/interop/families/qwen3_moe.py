"""Qwen3-MoE: Qwen3's attention (GQA, QK-norm) with a softmax top-k router over SwiGLU experts.

Config: ``num_experts`` (``num_local_experts`` in transformers' ``to_dict``) -> ``model.moe_experts``,
``num_experts_per_tok`` -> ``moe_top_k``, ``norm_topk_prob`` -> ``moe_renormalize``,
``moe_intermediate_size`` -> ``moe_d_ff``; a layer i is MoE when it is not in ``mlp_only_layers`` and
``(i + 1) % decoder_sparse_step == 0`` (-> ``moe_layers``, empty when all are), the others are dense
SwiGLU FFNs of ``intermediate_size`` (``d_ff``). Export writes ``decoder_sparse_step=1`` and the dense
layers as ``mlp_only_layers``. The load-balancing loss weight is not imported (a training setting).

Tensors (checkpoint layout): ``mlp.gate.weight`` [E, D] -> ``moe/router``,
``mlp.experts.{e}.{gate,up,down}_proj.weight`` -> ``moe/{gate,up,down}`` stacked.
"""
from __future__ import annotations

from edge_jax.interop import layouts
from edge_jax.interop.families.common import (
    decoder_hf_config,
    decoder_keys,
    no_sliding_window,
    refuse,
    refuse_model,
    silu_only,
)
from edge_jax.interop.family import FAMILIES, Family, Unsupported


def n_experts(c: dict) -> int:
    return int(c.get("num_experts", c.get("num_local_experts")) or 0)


def model_keys(c: dict) -> dict:
    silu_only(c)
    no_sliding_window(c)
    refuse(c, "attention_bias", (False,), "Qwen3-MoE has no attention biases")
    keys = {**decoder_keys(c), "qk_norm": True}
    n, e = keys["n_layers"], n_experts(c)
    step, dense = int(c.get("decoder_sparse_step") or 1), set(c.get("mlp_only_layers") or ())
    moe = tuple(i for i in range(n) if e > 0 and i not in dense and (i + 1) % step == 0)
    if not moe:
        return keys
    return {**keys, "moe_experts": e, "moe_top_k": int(c["num_experts_per_tok"]),
            "moe_d_ff": int(c["moe_intermediate_size"]), "moe_renormalize": bool(c.get("norm_topk_prob", False)),
            "moe_layers": () if len(moe) == n else moe}


def _check_exportable(cfg) -> None:
    refuse_model(cfg, "Qwen3-MoE")
    if not cfg.qk_norm:
        raise Unsupported("model.qk_norm=False has no Qwen3-MoE form (Qwen3 normalises q and k)")
    if cfg.moe_router != "softmax" or cfg.moe_routed_scale != 1.0 or cfg.moe_shared_d_ff:
        raise Unsupported(f"model.moe_router={cfg.moe_router!r} with moe_routed_scale={cfg.moe_routed_scale} and "
                          f"moe_shared_d_ff={cfg.moe_shared_d_ff} has no Qwen3-MoE form (softmax, 1.0, 0 only)")


def hf_config(cfg) -> dict:
    _check_exportable(cfg)
    moe = set(cfg.moe_layer_ids())
    out = {**decoder_hf_config(cfg, "qwen3_moe", "Qwen3MoeForCausalLM"), "attention_bias": False,
           "decoder_sparse_step": 1, "mlp_only_layers": [i for i in range(cfg.n_layers) if i not in moe],
           "num_experts": cfg.moe_experts}
    if moe:
        out.update(num_experts_per_tok=cfg.moe_top_k, moe_intermediate_size=cfg.moe_d_ff or cfg.d_ff,
                   norm_topk_prob=bool(cfg.moe_renormalize))
    return out


def moe_ffn(cfg, i: int) -> list:
    """Layer ``i``'s MoE (router and stacked experts), or its dense FFN."""
    if i not in cfg.moe_layer_ids():
        return layouts.dense_ffn(cfg, i)
    hf, ours = layouts.HF_LAYER.format(i=i) + "mlp.", f"layers_{i}/moe"
    return [layouts.router(f"{ours}/router", hf + "gate.weight", cfg.moe_experts, cfg.d_model),
            *layouts.experts(ours, hf + "experts", cfg.moe_experts, cfg.d_model, cfg.moe_d_ff or cfg.d_ff)]


def tensors(cfg) -> list:
    return layouts.decoder(cfg, layouts.gqa_attention, moe_ffn)


FAMILIES.register("qwen3_moe", Family(("qwen3_moe",), "Qwen3MoeForCausalLM", model_keys, hf_config, tensors))
