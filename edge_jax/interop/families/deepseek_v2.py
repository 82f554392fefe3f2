"""DeepSeek-V2 (and -Lite): multi-head latent attention (``model.attention=mla``) and DeepSeekMoE.

Config: ``qk_nope_head_dim`` -> ``head_dim`` (must equal ``v_head_dim``), ``qk_rope_head_dim`` -> ``d_rope``,
``kv_lora_rank``, ``q_lora_rank`` (None -> 0, a full-rank query); RoPE via :func:`edge_jax.interop.rope.rope_keys`
(YaRN's ``mscale_all_dim`` scales the softmax, :mod:`edge_jax.layers.attention.mla`). MoE:
``n_routed_experts`` -> ``moe_experts``, ``num_experts_per_tok`` -> ``moe_top_k``, ``moe_intermediate_size``
-> ``moe_d_ff``, ``n_shared_experts * moe_intermediate_size`` -> ``moe_shared_d_ff``, ``routed_scaling_factor``
-> ``moe_routed_scale``, ``topk_method`` ``greedy`` -> ``moe_router=softmax``, ``group_limited_greedy`` ->
``group_limited`` with ``n_group``/``topk_group``; layer i is MoE when ``i >= first_k_dense_replace`` and
``i % moe_layer_freq == 0`` (DeepSeek's code; transformers has no ``moe_layer_freq`` and export writes
none), the others are dense SwiGLU of ``intermediate_size``. Refused: ``norm_topk_prob=True``
(transformers ignores it, DeepSeek's code renormalises), ``rms_norm_eps != 1e-6`` (the latent norms
always use 1e-6), biases, ``scoring_func`` other than softmax.

Tensors (checkpoint layout): ``self_attn.q_proj`` [H*(K+R), D] (or ``q_a_proj`` [r, D] ->
``q_a_layernorm`` -> ``q_b_proj``), ``kv_a_proj_with_mqa`` [C+R, D] = our ``kv_down`` rows then the
shared rope key's (``k_rope_proj``), ``kv_a_layernorm``, ``kv_b_proj`` [H*(K+V), C] (per head K key rows
-> ``k_up``, then V value rows -> ``v_up``), ``o_proj`` [D, H*V]. HF rotates interleaved pairs
(x[2i], x[2i+1]), ours halves (x[i], x[i+R/2]), so the rope rows of the query and of the rope key are
reordered by :func:`rope_perm` (q.k is unchanged). MoE: ``mlp.gate.weight``, ``mlp.experts.{e}.*``,
``mlp.shared_experts.{gate,up,down}_proj`` -> ``moe/shared/{gate,up,down}/kernel``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from edge_jax.interop import layouts
from edge_jax.interop.families.common import refuse, refuse_model, rope_parameters, silu_only
from edge_jax.interop.family import FAMILIES, Family, Tensor, Unsupported, copy, linear, permuted

SUBNORM_EPS = 1e-6  # DeepseekV2RMSNorm default: q_a_layernorm / kv_a_layernorm ignore rms_norm_eps
METHODS = {"greedy": "softmax", "group_limited_greedy": "group_limited"}


def rope_perm(R: int) -> np.ndarray:
    """Our rope dim j takes HF's dim perm[j]: HF pair (2i, 2i+1) becomes our pair (i, i + R/2)."""
    return np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2)])


def _int(c: dict, key: str, default=0) -> int:
    value = c.get(key)
    return default if value is None else int(value)


def moe_layer_ids(c: dict, n_layers: int) -> tuple[int, ...]:
    freq = _int(c, "moe_layer_freq", 1)
    if freq < 1:
        raise Unsupported(f"unsupported setting moe_layer_freq={freq} (must be >= 1)")
    first = _int(c, "first_k_dense_replace")
    return tuple(i for i in range(n_layers) if _int(c, "n_routed_experts") and i >= first and i % freq == 0)


def _refuse(c: dict) -> None:
    silu_only(c)
    refuse(c, "attention_bias", (False,), "MLA here has no biases")
    refuse(c, "mlp_bias", (False,), "the SwiGLU FFN has no biases")
    refuse(c, "scoring_func", ("softmax",), "the DeepSeek-V2 router is a softmax")
    refuse(c, "topk_method", tuple(METHODS))
    refuse(c, "norm_topk_prob", (False,), "transformers' DeepSeek-V2 ignores it, DeepSeek's code renormalises")
    refuse(c, "rms_norm_eps", (SUBNORM_EPS,), "the q_a/kv_a layernorms always use 1e-6 and edge_jax has one norm_eps")
    if c["v_head_dim"] != c["qk_nope_head_dim"]:
        raise Unsupported(f"unsupported setting v_head_dim={c['v_head_dim']} != qk_nope_head_dim="
                          f"{c['qk_nope_head_dim']} (MLA here has one head_dim for key content and value)")
    n_heads = int(c["num_attention_heads"])
    if _int(c, "num_key_value_heads", n_heads) != n_heads:
        raise Unsupported(f"unsupported setting num_key_value_heads={c['num_key_value_heads']} != "
                          f"num_attention_heads={n_heads}")
    if c.get("q_lora_rank") is not None and int(c["q_lora_rank"]) <= 0:
        raise Unsupported(f"unsupported setting q_lora_rank={c['q_lora_rank']}: None (full rank) or positive")
    if int(c["qk_rope_head_dim"]) <= 0 or int(c["qk_rope_head_dim"]) % 2:
        raise Unsupported(f"unsupported setting qk_rope_head_dim={c['qk_rope_head_dim']}: positive and even")


def model_keys(c: dict) -> dict:
    from edge_jax.interop.rope import rope_keys

    _refuse(c)
    n = int(c["num_hidden_layers"])
    keys = dict(vocab_size=int(c["vocab_size"]), d_model=int(c["hidden_size"]), n_layers=n,
                n_heads=int(c["num_attention_heads"]), n_kv_heads=int(c["num_attention_heads"]),
                head_dim=int(c["qk_nope_head_dim"]), d_ff=int(c["intermediate_size"]), qk_norm=False,
                tie_embeddings=bool(c.get("tie_word_embeddings", False)), norm_eps=SUBNORM_EPS, ffn="swiglu",
                attention="mla", kv_lora_rank=int(c["kv_lora_rank"]), q_lora_rank=_int(c, "q_lora_rank"),
                d_rope=int(c["qk_rope_head_dim"]), **rope_keys(rope_parameters(c), c))
    moe = moe_layer_ids(c, n)
    if not moe:
        return keys
    method = c.get("topk_method") or "greedy"
    group = method == "group_limited_greedy"
    d_ff = int(c["moe_intermediate_size"])
    return {**keys, "moe_experts": int(c["n_routed_experts"]), "moe_top_k": int(c["num_experts_per_tok"]),
            "moe_d_ff": d_ff, "moe_layers": () if len(moe) == n else moe, "moe_router": METHODS[method],
            "moe_n_group": int(c["n_group"]) if group else 1, "moe_topk_group": int(c["topk_group"]) if group else 1,
            "moe_routed_scale": float(c.get("routed_scaling_factor") or 1.0),
            "moe_shared_d_ff": _int(c, "n_shared_experts") * d_ff}


def _moe_hf(cfg) -> dict:
    """The MoE entries of ``config.json``; :class:`Unsupported` for what DeepSeek-V2 has no form of."""
    moe = cfg.moe_layer_ids()
    if not moe:
        return {"first_k_dense_replace": cfg.n_layers}
    if moe != tuple(range(moe[0], cfg.n_layers)):
        raise Unsupported(f"model.moe_layers={moe} has no DeepSeek-V2 form (MoE from first_k_dense_replace on)")
    router = {v: k for k, v in METHODS.items()}.get(cfg.moe_router)
    d_ff = cfg.moe_d_ff or cfg.d_ff
    if router is None or cfg.moe_renormalize or cfg.moe_shared_d_ff % d_ff:
        raise Unsupported(f"model.moe_router={cfg.moe_router!r} (renormalize={cfg.moe_renormalize}, moe_shared_d_ff="
                          f"{cfg.moe_shared_d_ff}) has no DeepSeek-V2 form (softmax or group_limited, not "
                          "renormalised, shared width a multiple of moe_d_ff)")
    group = cfg.moe_router == "group_limited"
    return {"first_k_dense_replace": moe[0], "n_routed_experts": cfg.moe_experts, "num_experts_per_tok": cfg.moe_top_k,
            "moe_intermediate_size": d_ff, "n_shared_experts": cfg.moe_shared_d_ff // d_ff, "topk_method": router,
            "n_group": cfg.moe_n_group if group else None, "topk_group": cfg.moe_topk_group if group else None,
            "routed_scaling_factor": float(cfg.moe_routed_scale), "norm_topk_prob": False}


def hf_config(cfg) -> dict:
    from edge_jax.interop.rope import rope_hf

    refuse_model(cfg, "DeepSeek-V2")
    if cfg.attention != "mla" or cfg.qk_norm or cfg.norm_eps != SUBNORM_EPS:
        raise Unsupported(f"model.attention={cfg.attention!r} (qk_norm={cfg.qk_norm}, norm_eps={cfg.norm_eps}) has "
                          "no DeepSeek-V2 form (mla, no QK-norm, norm_eps 1e-6)")
    return {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_heads, "intermediate_size": cfg.d_ff, "qk_nope_head_dim": cfg.head_dim,
            "v_head_dim": cfg.head_dim, "qk_rope_head_dim": cfg.d_rope, "head_dim": cfg.d_rope,
            "kv_lora_rank": cfg.kv_lora_rank, "q_lora_rank": cfg.q_lora_rank or None,
            "tie_word_embeddings": cfg.tie_embeddings, "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "rope_parameters": rope_hf(cfg), "dtype": cfg.param_dtype,
            **_moe_hf(cfg)}


def _query_up(ours: str, hf: str, cfg, inp: int) -> Tensor:
    """``[H*(K+R), in]`` <-> ``[in, H, K+R]``, each head's rope part reordered."""
    H, K, R = cfg.n_heads, cfg.head_dim, cfg.d_rope
    return permuted(linear(ours, hf, (H, K + R), (inp,)), np.concatenate([np.arange(K), K + rope_perm(R)]), -1)


def _split(hf: str, shape: tuple, parts: dict, to_hf) -> list[Tensor]:
    """One HF tensor as several of our params: ``parts`` = {ours: hf tensor -> that param}; the first
    entry writes the tensor back with ``to_hf(*params in parts' order)`` (:class:`Tensor` ``joins``)."""
    names = list(parts)
    out = [Tensor(ours, (hf,), shape, lambda xs, f=f: f(xs[0]), None, exported=False) for ours, f in parts.items()]
    out[0] = dataclasses.replace(out[0], joins=tuple(names[1:]), exported=True, to_hf=lambda *a: [to_hf(*a)])
    return out


def mla_attention(cfg, i: int) -> list[Tensor]:
    D, H, K, R, C = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.d_rope, cfg.kv_lora_rank
    ours, hf = f"layers_{i}/attn/", layouts.HF_LAYER.format(i=i) + "self_attn."
    if cfg.q_lora_rank:
        q = cfg.q_lora_rank
        out = [linear(ours + "q_down/kernel", hf + "q_a_proj.weight", (q,), (D,)),
               copy(ours + "q_norm/scale", hf + "q_a_layernorm.weight", (q,)),
               _query_up(ours + "q_up/kernel", hf + "q_b_proj.weight", cfg, q)]
    else:
        out = [_query_up(ours + "q_proj/kernel", hf + "q_proj.weight", cfg, D)]
    perm, inv = rope_perm(R), np.argsort(rope_perm(R))
    out += _split(hf + "kv_a_proj_with_mqa.weight", (C + R, D),  # rows: latent, then the rope key
                  {ours + "kv_down/kernel": lambda w: w[:C].T, ours + "k_rope_proj/kernel": lambda w: w[C:][perm].T},
                  lambda down, rope: np.concatenate([down.T, rope.T[inv]]))
    heads = lambda w: w.reshape(H, 2 * K, C).transpose(2, 0, 1)  # noqa: E731  [C, H, 2K]: K key, K value rows
    out += _split(hf + "kv_b_proj.weight", (H * 2 * K, C),
                  {ours + "k_up": lambda w: heads(w)[..., :K], ours + "v_up": lambda w: heads(w)[..., K:]},
                  lambda k, v: np.concatenate([k, v], -1).transpose(1, 2, 0).reshape(H * 2 * K, C))
    return out + [copy(ours + "kv_norm/scale", hf + "kv_a_layernorm.weight", (C,)),
                  linear(ours + "o_proj/kernel", hf + "o_proj.weight", (D,), (H, K))]


def moe_ffn(cfg, i: int) -> list[Tensor]:
    if i not in cfg.moe_layer_ids():
        return layouts.dense_ffn(cfg, i)
    hf, ours = layouts.HF_LAYER.format(i=i) + "mlp.", f"layers_{i}/moe"
    out = [layouts.router(f"{ours}/router", hf + "gate.weight", cfg.moe_experts, cfg.d_model),
           *layouts.experts(ours, hf + "experts", cfg.moe_experts, cfg.d_model, cfg.moe_d_ff or cfg.d_ff)]
    if cfg.moe_shared_d_ff:
        out += layouts.swiglu_mlp(f"{ours}/shared", hf + "shared_experts", cfg.d_model, cfg.moe_shared_d_ff)
    return out


def tensors(cfg) -> list[Tensor]:
    return layouts.decoder(cfg, mla_attention, moe_ffn)


FAMILIES.register("deepseek_v2", Family(("deepseek_v2",), "DeepseekV2ForCausalLM", model_keys, hf_config, tensors))
