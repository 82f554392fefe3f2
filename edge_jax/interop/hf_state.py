"""What the HF converters share: config dicts (4.x or 5.x layout) and RoPE settings, reading a state
dict tensor by tensor with shape checks, and the decoder skeleton around attention (embedding, norms,
SwiGLU MLP, final norm, LM head).

HF linear weights are ``[out, in]``; ours are ``[in, out...]``, hence the transposes in :meth:`linear`.
Every tensor read is recorded, so a tensor the model does not use is an error, not silently dropped.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from edge_jax.models.scan import stack_layers

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # non-persistent buffers some checkpoints still carry


def _to_f32(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch.Tensor (numpy() cannot take bf16, so upcast in torch first)
        import torch
        return x.detach().to(device="cpu", dtype=torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


def _tree_map(fn, tree):
    return {k: _tree_map(fn, v) if isinstance(v, dict) else fn(v) for k, v in tree.items()}


def config_dict(hf_config) -> dict:
    if isinstance(hf_config, Mapping):
        return dict(hf_config)
    if hasattr(hf_config, "to_dict"):
        return hf_config.to_dict()
    return dict(vars(hf_config))


def rope_settings(c: dict) -> tuple[float, dict]:
    """(rope_theta, rope parameters) from a 5.x ``rope_parameters`` or a 4.x ``rope_theta``/``rope_scaling``."""
    rp = c.get("rope_parameters") or {}
    if rp and "rope_type" not in rp and "rope_theta" not in rp and isinstance(rp.get("full_attention"), Mapping):
        rp = rp["full_attention"]  # per-layer-type layout
    rp = dict(rp)
    scaling = c.get("rope_scaling") or {}
    for k, v in dict(scaling).items():
        rp.setdefault(k, v)
    theta = rp.get("rope_theta", c.get("rope_theta"))
    if theta is None:
        theta = 10_000.0  # Qwen3Config default
    return float(theta), rp


class StateDictReader:
    """Shape-checked float32 tensors from an HF state dict (``model.`` prefix or none)."""

    def __init__(self, state_dict: Mapping[str, Any], family: str):
        self.state_dict, self.used = state_dict, set()
        self.prefix = next((p for p in ("model.", "") if f"{p}embed_tokens.weight" in state_dict), None)
        if self.prefix is None:
            raise ValueError("missing tensor 'model.embed_tokens.weight' (expected shape [vocab_size, hidden_size]); "
                             f"not a {family} state dict?")

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        key = name if name.startswith("lm_head") else self.prefix + name
        if key not in self.state_dict:
            raise ValueError(f"missing tensor {key!r} (expected shape {list(shape)})")
        got = tuple(int(s) for s in self.state_dict[key].shape)
        if got != shape:
            raise ValueError(f"tensor {key!r} has shape {list(got)}, expected {list(shape)}")
        self.used.add(key)
        return _to_f32(self.state_dict[key])

    def linear(self, name: str, out: int, inp: int) -> np.ndarray:  # HF [out, in] -> ours [in, out]
        return self.get(name, (out, inp)).T


def decoder_params(reader: StateDictReader, cfg, attention: Callable[[str], dict]) -> dict:
    """``{"params": ...}`` for ``DecoderLM(cfg)``: ``attention(prefix)`` builds each layer's ``attn``
    subtree from ``layers.{i}.self_attn.*``; the rest is the common Llama-style layout. With
    ``cfg.scan_layers`` the layers come stacked (:func:`edge_jax.models.scan.stack_layers`)."""
    import jax.numpy as jnp

    V, D, F, get, linear = cfg.vocab_size, cfg.d_model, cfg.d_ff, reader.get, reader.linear
    params: dict[str, Any] = {"embed": {"embedding": get("embed_tokens.weight", (V, D))}}
    for i in range(cfg.n_layers):
        L = f"layers.{i}."
        params[f"layers_{i}"] = {
            "attn_norm": {"scale": get(L + "input_layernorm.weight", (D,))},
            "attn": attention(L + "self_attn."),
            "ffn_norm": {"scale": get(L + "post_attention_layernorm.weight", (D,))},
            "ffn": {"gate": {"kernel": linear(L + "mlp.gate_proj.weight", F, D)},
                    "up": {"kernel": linear(L + "mlp.up_proj.weight", F, D)},
                    "down": {"kernel": linear(L + "mlp.down_proj.weight", D, F)}},
        }
    params["final_norm"] = {"scale": get("norm.weight", (D,))}
    if not cfg.tie_embeddings:
        params["lm_head"] = {"kernel": linear("lm_head.weight", V, D)}
    elif "lm_head.weight" in reader.state_dict:
        reader.used.add("lm_head.weight")  # tied copy (or a stale untied head; HF ignores it too when tied)
    extra = sorted(k for k in reader.state_dict if k not in reader.used and not k.endswith(_IGNORED_SUFFIXES))
    if extra:
        raise ValueError(f"unexpected tensors not used by DecoderLM ({len(extra)}): {', '.join(extra[:5])}"
                         + (", ..." if len(extra) > 5 else ""))
    if getattr(cfg, "scan_layers", False):  # one scanned block: layers/... with a leading layer axis
        params = stack_layers(params, cfg.n_layers)
    return {"params": _tree_map(lambda a: jnp.asarray(np.ascontiguousarray(a), dtype=jnp.float32), params)}
