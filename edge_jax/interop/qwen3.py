"""Hugging Face Qwen3 -> ``DecoderLM`` conversion (config + weights).

``model_config_from_hf`` maps a ``transformers`` Qwen3 config (object or dict, 4.x or 5.x layout) to our
:class:`ModelConfig`; ``params_from_hf_state_dict`` maps an HF state dict (torch tensors or numpy arrays)
to the plain ``{"params": ...}`` tree that ``DecoderLM(cfg).apply`` takes. ``load_hf_model`` and
``load_safetensors`` wrap both for an in-memory model and for a local checkpoint directory.

torch / transformers / safetensors are imported lazily, so this module imports without the ``interop`` extra.
HF linear weights are ``[out, in]``; ours are ``[in, out...]``, hence the transposes below.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, Mapping

import numpy as np

from edge_jax.interop.hf_state import (
    StateDictReader,
    config_dict,
    decoder_params,
    rope_settings,
)
from edge_jax.models.decoder import ModelConfig
from edge_jax.utils.extras import require


def model_config_from_hf(hf_config) -> ModelConfig:
    """ModelConfig for a transformers Qwen3 config; ValueError (one line) on settings we do not implement."""
    c = config_dict(hf_config)
    model_type = c.get("model_type", "qwen3")
    if model_type != "qwen3":
        raise ValueError(f"unsupported model_type={model_type!r}: only 'qwen3' is supported")
    if c.get("attention_bias", False):
        raise ValueError("unsupported setting attention_bias=True (DecoderLM has no attention biases)")
    if c.get("mlp_bias", False):
        raise ValueError("unsupported setting mlp_bias=True (DecoderLM has no MLP biases)")
    act = c.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"unsupported setting hidden_act={act!r}: only 'silu' (SwiGLU) is supported")
    n_layers = int(c["num_hidden_layers"])
    sliding_window = c.get("sliding_window") if c.get("use_sliding_window", False) else None
    layer_types = c.get("layer_types")
    if layer_types is None:  # transformers 4.x semantics
        mwl = c.get("max_window_layers", n_layers)
        layer_types = ["sliding_attention" if sliding_window is not None and i >= mwl else "full_attention"
                       for i in range(n_layers)]
    if sliding_window is not None and "sliding_attention" in layer_types:
        raise ValueError(f"unsupported setting sliding_window={sliding_window} (use_sliding_window=True with "
                         f"sliding_attention layers); DecoderLM only has full causal attention")
    theta, rp = rope_settings(c)
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    if rope_type != "default":
        raise ValueError(f"unsupported setting rope_type={rope_type!r}: only default RoPE is supported")
    if float(rp.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(f"unsupported setting partial_rotary_factor={rp['partial_rotary_factor']}")
    n_heads = int(c["num_attention_heads"])
    n_kv = c.get("num_key_value_heads") or n_heads
    head_dim = c.get("head_dim") or int(c["hidden_size"]) // n_heads
    return ModelConfig(
        vocab_size=int(c["vocab_size"]), d_model=int(c["hidden_size"]), n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=int(n_kv), head_dim=int(head_dim), d_ff=int(c["intermediate_size"]),
        rope_theta=theta, qk_norm=True, tie_embeddings=bool(c.get("tie_word_embeddings", False)),
        norm_eps=float(c.get("rms_norm_eps", 1e-6)), ffn="swiglu", dtype="float32", param_dtype="float32")


def params_from_hf_state_dict(state_dict: Mapping[str, Any], cfg: ModelConfig) -> dict:
    """Plain float32 ``{"params": ...}`` tree for ``DecoderLM(cfg)`` from an HF Qwen3 state dict."""
    D, H, G, K = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    r = StateDictReader(state_dict, "Qwen3")

    def attention(A: str) -> dict:
        attn = {
            "q_proj": {"kernel": r.linear(A + "q_proj.weight", H * K, D).reshape(D, H, K)},
            "k_proj": {"kernel": r.linear(A + "k_proj.weight", G * K, D).reshape(D, G, K)},
            "v_proj": {"kernel": r.linear(A + "v_proj.weight", G * K, D).reshape(D, G, K)},
            "o_proj": {"kernel": r.linear(A + "o_proj.weight", D, H * K).reshape(H, K, D)},
        }
        if cfg.qk_norm:
            attn["q_norm"] = {"scale": r.get(A + "q_norm.weight", (K,))}
            attn["k_norm"] = {"scale": r.get(A + "k_norm.weight", (K,))}
        return attn

    return decoder_params(r, cfg, attention)


def load_hf_model(model) -> tuple[ModelConfig, dict]:
    """``(cfg, params)`` from an in-memory ``transformers`` Qwen3 model (e.g. ``Qwen3ForCausalLM``)."""
    cfg = model_config_from_hf(model.config)
    return cfg, params_from_hf_state_dict(model.state_dict(), cfg)


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
    import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with numpy so framework="numpy" can hold them)
    from safetensors import safe_open

    out: dict[str, Any] = {}
    try:
        with safe_open(path, framework="numpy") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    except TypeError:  # dtype numpy still does not understand: let JAX hold it
        with safe_open(path, framework="flax") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def load_safetensors(path_or_dir: str | os.PathLike) -> tuple[ModelConfig, dict]:
    """``(cfg, params)`` from a local HF checkpoint: ``config.json`` + ``*.safetensors`` (sharded or not).

    ``path_or_dir`` is the checkpoint directory or one ``.safetensors`` file (``config.json`` beside it).
    """
    path = os.fspath(path_or_dir)
    require("safetensors", f"reading the checkpoint {path}")
    if os.path.isdir(path):
        directory = path
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as fh:
                names = sorted(set(json.load(fh)["weight_map"].values()))
            files = [os.path.join(path, n) for n in names]
        else:
            files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    else:
        directory, files = os.path.dirname(path) or ".", [path]
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    cfg_path = os.path.join(directory, "config.json")
    if not os.path.exists(cfg_path):
        raise FileNotFoundError(f"missing {cfg_path}")
    with open(cfg_path) as fh:
        cfg = model_config_from_hf(json.load(fh))
    state: dict[str, Any] = {}
    for f in files:
        state.update(_read_safetensors(f))
    return cfg, params_from_hf_state_dict(state, cfg)
