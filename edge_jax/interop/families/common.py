"""Config reading the families share: HF ``config.json`` values with one-line refusals, RoPE settings
(4.x ``rope_theta``/``rope_scaling`` or 5.x ``rope_parameters``), and the Llama-layout keys."""
from __future__ import annotations

from typing import Mapping

from edge_jax.interop.family import Unsupported


def rope_parameters(c: Mapping) -> dict:
    """The RoPE parameters, ``rope_theta`` and ``rope_type`` included, from either config layout."""
    rp = dict(c.get("rope_parameters") or {})
    if rp and "rope_type" not in rp and "rope_theta" not in rp and isinstance(rp.get("full_attention"), Mapping):
        rp = dict(rp["full_attention"])  # per-layer-type layout
    for k, v in dict(c.get("rope_scaling") or {}).items():
        rp.setdefault(k, v)
    rp.setdefault("rope_theta", c.get("rope_theta", 10_000.0))
    rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
    return rp


def refuse(c: Mapping, key: str, allowed, why: str = "") -> None:
    """:class:`Unsupported` when ``c[key]`` is set to something outside ``allowed``."""
    value = c.get(key)
    if value is not None and value not in allowed:
        raise Unsupported(f"unsupported setting {key}={value!r} (edge_jax takes {', '.join(map(repr, allowed))})"
                          + (f": {why}" if why else ""))


def silu_only(c: Mapping) -> None:
    refuse(c, "hidden_act", ("silu", "swish"), "the FFN is SwiGLU")


def no_sliding_window(c: Mapping) -> None:
    layer_types = c.get("layer_types") or ()
    if c.get("use_sliding_window") and c.get("sliding_window") is not None or "sliding_attention" in layer_types:
        raise Unsupported(f"unsupported setting sliding_window={c.get('sliding_window')} on some layers; "
                          "edge_jax has full causal attention only")


def refuse_model(cfg, family: str, **expected) -> None:
    """:class:`Unsupported` when one of our model keys differs from the value ``family``'s HF form has
    (``norm="rmsnorm"``, ``qkv_bias=False``, ``o_bias=False`` and ``lm_head_bias=False`` unless given)."""
    for key, want in {"norm": "rmsnorm", "qkv_bias": False, "o_bias": False, "lm_head_bias": False,
                      **expected}.items():
        value = getattr(cfg, key)
        if value != want:
            raise Unsupported(f"model.{key}={value!r} has no {family} form (it takes {want!r})")


def decoder_keys(c: Mapping) -> dict:
    """The ``model.*`` decoder keys of a Llama-layout config (GQA, SwiGLU, RMSNorm), RoPE included."""
    from edge_jax.interop.rope import rope_keys

    n_heads = int(c["num_attention_heads"])
    return dict(vocab_size=int(c["vocab_size"]), d_model=int(c["hidden_size"]),
                n_layers=int(c["num_hidden_layers"]), n_heads=n_heads,
                n_kv_heads=int(c.get("num_key_value_heads") or n_heads),
                head_dim=int(c.get("head_dim") or int(c["hidden_size"]) // n_heads),
                d_ff=int(c["intermediate_size"]), tie_embeddings=bool(c.get("tie_word_embeddings", False)),
                norm_eps=float(c.get("rms_norm_eps", 1e-6)), ffn="swiglu", attention="gqa",
                **rope_keys(rope_parameters(c), c))


def decoder_hf_config(cfg, model_type: str, architecture: str) -> dict:
    """The Llama-layout ``config.json`` entries of our decoder keys (a family adds its own)."""
    from edge_jax.interop.rope import rope_hf

    return {"architectures": [architecture], "model_type": model_type, "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
            "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "intermediate_size": cfg.d_ff,
            "tie_word_embeddings": cfg.tie_embeddings, "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
            "rope_parameters": rope_hf(cfg), "dtype": cfg.param_dtype}
