"""MeKi re-parameterisation (eqs. 9-11) as a pure function: training params in, inference params out.

``M~ = alpha * RMSNorm(M + beta * G(E))`` depends on the token id only, so it is evaluated once
for every row of the vocabulary with the very module the training form uses
(:class:`edge_jax.layers.token_memory.meki.MeKiExpert`) and stored as ``layers_i/meki/table``. The input
tree is never modified: the result is a new tree that shares the unchanged leaves, so
training can go on from the original parameters (the MeKi authors fold in place, which makes
training after an evaluation count the dynamic term twice).
"""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.layers.token_memory.meki import MeKiExpert
from edge_jax.models.decoder import ModelConfig
from edge_jax.models.scan import stack_layers, unstack_layers

FOLD_CHUNK = 16_384  # vocabulary rows per evaluation of G (bounds memory at paper vocabularies)


class FoldError(ValueError):
    """The tree cannot be folded (not MeKi, or already folded)."""


def expert_module(cfg: ModelConfig) -> MeKiExpert:
    return MeKiExpert(cfg.vocab_size, cfg.d_mem, cfg.meki_static, cfg.meki_dynamic, cfg.meki_projection,
                      cfg.norm_eps, cfg.init_std, cfg.dtype, cfg.param_dtype)


@partial(jax.jit, static_argnums=0)
def _expert_rows(module: MeKiExpert, p, ids_N, emb_ND):
    return module.apply({"params": p}, ids_N[None], emb_ND[None])[0]


def fold_table(cfg: ModelConfig, expert_params, embedding_VD):
    """``M~`` [V, d_mem] for one layer, computed in chunks of the vocabulary (compiled once per shape)."""
    module = expert_module(cfg)
    V = embedding_VD.shape[0]
    parts = [_expert_rows(module, expert_params, jnp.arange(s, min(s + FOLD_CHUNK, V)),
                          embedding_VD[s:s + FOLD_CHUNK])
             for s in range(0, V, FOLD_CHUNK)]
    return jnp.concatenate(parts, axis=0).astype(jnp.dtype(cfg.param_dtype))


def fold_meki(params: Mapping, cfg: ModelConfig) -> tuple[dict, ModelConfig]:
    """``(inference_params, inference_cfg)`` for a training-form MeKi model; ``params`` is unchanged.
    A scanned model (``model.scan_layers``) is folded layer by layer and stacked again."""
    if cfg.memory != "meki":
        raise FoldError(f"model.memory={cfg.memory!r} has no MeKi memory to fold; fold a MeKi model")
    if cfg.scan_layers:
        folded, folded_cfg = fold_meki(unstack_layers(nn.unbox(params)), dataclasses.replace(cfg, scan_layers=False))
        return stack_layers(folded, cfg.n_layers), dataclasses.replace(folded_cfg, scan_layers=True)
    if cfg.meki_folded or any("table" in params[f"layers_{i}"]["meki"] for i in range(cfg.n_layers)):
        raise FoldError("these MeKi parameters are already folded (they hold meki/table); "
                        "fold the training-form parameters instead")
    params = nn.unbox(params)  # boxed (freshly initialised) trees fold too
    embedding = params["embed"]["embedding"]
    out = dict(params)
    for i in range(cfg.n_layers):
        name = f"layers_{i}"
        meki = dict(params[name]["meki"])
        expert = meki.pop("expert")
        meki["table"] = fold_table(cfg, expert, embedding)
        out[name] = {**params[name], "meki": meki}
    return out, folded_config(cfg)


def folded_config(cfg: ModelConfig) -> ModelConfig:
    """The inference-form config of a MeKi model (same config for any other memory)."""
    return dataclasses.replace(cfg, meki_folded=True) if cfg.memory == "meki" else cfg
