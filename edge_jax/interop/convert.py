"""HF config and tensors <-> our ModelConfig and params, through a family's maps
(:mod:`edge_jax.interop.family`), with every shape and name checked.

``get`` is any ``name -> array`` reader (an in-memory state dict, or the streaming safetensors
reader of :mod:`edge_jax.interop.safetensors_io`), so a whole checkpoint never needs to be in memory.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from edge_jax.config import flatten, unflatten
from edge_jax.interop.families import family_of
from edge_jax.interop.family import Family, Tensor, Unsupported
from edge_jax.models.config import ModelConfig

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # non-persistent buffers some checkpoints still carry


def model_config_from_hf(hf_config: Mapping, dtype: str = "float32") -> tuple[str, Family, ModelConfig]:
    """``(family name, family, ModelConfig)`` for an HF ``config.json`` dict; ``dtype`` is the model's
    compute and param dtype (the checkpoint's own by default on import)."""
    c = dict(hf_config)
    name, fam = family_of(str(c.get("model_type", "")))
    keys = fam.model_keys(c)
    return name, fam, ModelConfig(**{**keys, "dtype": dtype, "param_dtype": dtype})


def to_numpy(x) -> np.ndarray:
    """A torch tensor (any dtype, bfloat16 included, kept exact) or array as numpy."""
    if hasattr(x, "detach"):
        import ml_dtypes
        import torch
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def check_names(entries: list[Tensor], names: Iterable[str], cfg: ModelConfig) -> None:
    """Every tensor an entry needs is there and every tensor there is needed (one line naming the first);
    a tied model may carry its head's copy of the embedding (transformers ignores it too)."""
    have = {n for n in names if not n.endswith(_IGNORED_SUFFIXES)}
    if cfg.tie_embeddings:
        have.discard("lm_head.weight")
    want = {n for t in entries for n in t.hf}
    missing, extra = sorted(want - have), sorted(have - want)
    if missing:
        raise Unsupported(f"missing tensor {missing[0]!r} ({len(missing)} missing); the checkpoint does not match "
                          "its config.json")
    if extra:
        raise Unsupported(f"unexpected tensor {extra[0]!r} ({len(extra)} not used by this model"
                          f"{': ' + ', '.join(extra[1:4]) if len(extra) > 1 else ''}); the checkpoint does not "
                          "match its config.json")


def import_tensor(t: Tensor, get: Callable[[str], np.ndarray]) -> np.ndarray:
    """One of our params from the HF tensors it is made of, shapes checked."""
    parts = []
    for name in t.hf:
        x = get(name)
        if tuple(x.shape) != t.hf_shape:
            raise Unsupported(f"tensor {name!r} has shape {list(x.shape)}, expected {list(t.hf_shape)} from "
                              "config.json")
        parts.append(x)
    return np.ascontiguousarray(t.to_ours(parts))


def params_from_hf(fam: Family, cfg: ModelConfig, state: Mapping) -> dict:
    """``{"params": tree}`` of numpy arrays (the checkpoint's dtypes) from an in-memory HF state dict."""
    entries = fam.tensors(cfg)
    check_names(entries, state.keys(), cfg)
    return {"params": unflatten({t.ours: import_tensor(t, lambda n: to_numpy(state[n])) for t in entries}, "/")}


def hf_from_params(fam: Family, cfg: ModelConfig, params: Mapping) -> Iterator[tuple[str, np.ndarray]]:
    """The HF ``(name, array)`` pairs of our ``{"params": tree}`` (or the bare tree), one entry at a time."""
    flat = flatten(params.get("params", params), sep="/")
    entries = fam.tensors(cfg)
    extra = sorted(set(flat) - {t.ours for t in entries})
    if extra:
        raise Unsupported(f"param {extra[0]} has no HF equivalent in this family ({len(extra)} such)")
    for t in entries:
        if not t.exported:  # written by the entry that joins it
            continue
        for name, x in zip(t.hf, t.to_hf(np.asarray(flat[t.ours]), *(np.asarray(flat[o]) for o in t.joins))):
            yield name, np.ascontiguousarray(x)


def checkpoint_state(model) -> dict:
    """An in-memory transformers model's state dict in the checkpoint layout (what ``save_pretrained``
    writes): transformers 5 fuses some tensors in memory (MoE experts into ``experts.gate_up_proj``)."""
    from transformers.core_model_loading import revert_weight_conversion

    return dict(revert_weight_conversion(model, model.state_dict()))


def load_hf_model(model) -> tuple[ModelConfig, dict]:
    """``(cfg, {"params": ...})`` in float32 from an in-memory transformers model of any registered family."""
    _, fam, cfg = model_config_from_hf(model.config.to_dict())
    params = params_from_hf(fam, cfg, checkpoint_state(model))
    return cfg, {"params": _as_f32(params["params"])}


def _as_f32(tree: Mapping) -> dict:
    return {k: _as_f32(v) if isinstance(v, Mapping) else np.asarray(v, np.float32) for k, v in tree.items()}
