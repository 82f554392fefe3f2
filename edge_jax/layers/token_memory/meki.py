"""MeKi: memory-based expert knowledge injection (MeKi §3, eqs. 1-14).

Training form, per layer ``l`` and token ``x_t`` with hidden state ``h_t`` (the input the
branch shares with the FFN, i.e. the pre-FFN normed state for ``parallel_ffn``)::

    m_static  = M[x_t]                                  (1)  M: [V, d_mem], on ROM after folding
    m_dyn     = G(E[x_t])                               (2)  G: SwiGLU d_model -> d_model/2 -> d_mem
                                                              (or one linear map, §5.6)
    e         = alpha * RMSNorm(m_static + beta * m_dyn)  (3)  alpha, beta scalars initialised to 1
    g         = act(W_gate h_t)                         (4)  W_gate: d_model -> d_mem
    v         = e + g  (or e * g)                       (5)  fusion: add|mul x sigmoid|silu (Fig. 5)
    y         = RMSNorm(W_out v)                        (6)  W_out: d_mem -> d_model, no biases

Inference form (eqs. 9-14): everything in ``e`` depends on the token id only, so :func:`fold_meki`
(registered as this memory kind's inference form; generic code reaches it through
:mod:`edge_jax.models.inference`, which also folds a scanned stack layer by layer) evaluates
:class:`MeKiExpert` on the whole vocabulary once and stores ``M~ = alpha * RMSNorm(M + beta * G(E))``
as ``table``. The fold is pure: it returns a new tree sharing the unchanged leaves, so training can go
on from the original parameters (the MeKi authors fold in place, which makes training after an
evaluation count the dynamic term twice). The folded branch does a lookup ``M~[x_t]`` (or takes rows
gathered on the host) and the two d_mem x d_model matmuls. Both forms use the same
:func:`fuse_and_project`, so they cannot drift apart.

The RMSNorm inside ``e`` keeps its per-feature scale, like every RMSNorm in the model
(Megatron's RMSNorm, which the paper's code base uses, has one); it folds into the table.

Params: ``layers_i/meki/expert/{memory, proj_*, alpha, beta, norm}``, ``layers_i/meki/{gate, out, out_norm}``
(folded: ``layers_i/meki/{table, gate, out, out_norm}``), with its own pre-norm ``layers_i/meki_norm`` when
it sits after attention or after the FFN. A folded model also accepts the host input ``meki_rows``
[B, T, L, d_mem], its table rows gathered outside the model (e.g. from host memory).

Variant axes are registries: :data:`FUSIONS` (eq. 5), :data:`PROJECTIONS` (G, §5.6) and
:data:`POSITIONS` (where the branch joins the block, Table 4); a new one is one function and one
registration. The keys are declared once in :class:`MeKiKeys`.
"""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from edge_jax.errors import ConfigError
from edge_jax.layers.ffn import dense
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.token_memory.base import MEMORY_KINDS, InferenceFormError, MemoryKind, Placement
from edge_jax.registry import SECTIONS, Registry, Section
from edge_jax.sharding import take_rows

FUSIONS = Registry("MeKi fusion", key="model.meki_fusion")  # fuse(e, gate_logits) -> v (eqs. 4-5)
PROJECTIONS = Registry("MeKi projection", key="model.meki_projection")  # G(E[x]) inside MeKiExpert
POSITIONS = Registry("MeKi position", key="model.meki_position")  # -> Placement in the block


# Fig. 5's four: the expert vector plus or times the activated gate (eq. 5), e.g. add_sigmoid: e + sigmoid(g).
for _act_name, _act in (("sigmoid", nn.sigmoid), ("silu", nn.silu)):
    for _mode, _combine in (("add", jnp.add), ("mul", jnp.multiply)):
        FUSIONS.register(f"{_mode}_{_act_name}", lambda e, gate, combine=_combine, act=_act: combine(e, act(gate)))


@PROJECTIONS.register("swiglu")
def swiglu_projection(x_BTD, d_mem: int, a):
    """SwiGLU d_model -> d_model/2 -> d_mem (eq. 2); params proj_gate, proj_up, proj_down."""
    hidden = x_BTD.shape[-1] // 2
    gate = dense(hidden, ("embed", "mlp"), "proj_gate", *a)(x_BTD)
    up = dense(hidden, ("embed", "mlp"), "proj_up", *a)(x_BTD)
    return dense(d_mem, ("mlp", "mem"), "proj_down", *a)(nn.silu(gate) * up)


@PROJECTIONS.register("linear")
def linear_projection(x_BTD, d_mem: int, a):
    """One linear map d_model -> d_mem (§5.6); param proj."""
    return dense(d_mem, ("embed", "mem"), "proj", *a)(x_BTD)


# Eq. 8 puts MeKi beside the FFN, sharing its pre-norm; the other positions are Table 4's.
POSITIONS.register("parallel_ffn", Placement("ffn"))
POSITIONS.register("parallel_attn", Placement("attn"))
POSITIONS.register("after_attn", Placement("post_attn", own_norm=True))
POSITIONS.register("after_ffn", Placement("post_ffn", own_norm=True))


def _scalar(module: nn.Module, name: str):
    return module.param(name, nn.with_logical_partitioning(nn.initializers.ones, ()), (), jnp.float32)


class MeKiExpert(nn.Module):
    """Expert vectors ``e`` (eq. 3, or eqs. 15/16 with one memory off) for tokens and their
    input embeddings ``E[x]``. Depends on the token only, which is what makes folding exact."""
    vocab_size: int
    d_mem: int
    static: bool = True
    dynamic: bool = True
    projection: str = "swiglu"
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, tokens_BT, embedded_BTD):
        a = (self.init_std, self.dtype, self.param_dtype)
        m = 0.0
        if self.static:
            memory = self.param("memory", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                       ("vocab", "mem")),
                                (self.vocab_size, self.d_mem), jnp.dtype(self.param_dtype))
            m = take_rows(memory, tokens_BT).astype(jnp.dtype(self.dtype))
        if self.dynamic:
            dyn = PROJECTIONS.get(self.projection)(embedded_BTD.astype(jnp.dtype(self.dtype)), self.d_mem, a)
            m = m + _scalar(self, "beta") * dyn
        e = RMSNorm(self.norm_eps, "mem", self.param_dtype, name="norm")(m)
        return (_scalar(self, "alpha") * e).astype(jnp.dtype(self.dtype))


def fuse_and_project(e_BTM, h_BTD, fusion: str, norm_eps: float, init_std: float,
                     dtype: str, param_dtype: str):
    """Eqs. 4-6 (12-14): gate from ``h``, fuse with ``e``, project up and normalise. Called inside
    a compact module, whose parameters ``gate``, ``out`` and ``out_norm`` it creates."""
    a = (init_std, dtype, param_dtype)
    fuse = FUSIONS.get(fusion)
    v = fuse(e_BTM, dense(e_BTM.shape[-1], ("embed", "mem"), "gate", *a)(h_BTD))
    y = dense(h_BTD.shape[-1], ("mem", "embed"), "out", *a)(v)
    return RMSNorm(norm_eps, "norm", param_dtype, name="out_norm")(y)


class MeKi(nn.Module):
    """The MeKi branch. ``folded=False``: training form (expert computed from the memory and G);
    ``folded=True``: a lookup in ``table`` or, when ``rows_BTM`` is given, rows gathered outside."""
    vocab_size: int
    d_mem: int
    static: bool = True
    dynamic: bool = True
    projection: str = "swiglu"
    fusion: str = "add_sigmoid"
    folded: bool = False
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, h_BTD, tokens_BT, embedded_BTD=None, rows_BTM=None):
        if not self.folded:
            e = MeKiExpert(self.vocab_size, self.d_mem, self.static, self.dynamic, self.projection,
                           self.norm_eps, self.init_std, self.dtype, self.param_dtype, name="expert")(
                tokens_BT, embedded_BTD)
        elif rows_BTM is not None:
            e = rows_BTM.astype(jnp.dtype(self.dtype))
        else:
            table = self.param("table", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                     ("vocab", "mem")),
                               (self.vocab_size, self.d_mem), jnp.dtype(self.param_dtype))
            e = take_rows(table, tokens_BT).astype(jnp.dtype(self.dtype))
        return fuse_and_project(e, h_BTD, self.fusion, self.norm_eps, self.init_std, self.dtype,
                                self.param_dtype)


@dataclasses.dataclass(frozen=True)
class MeKiKeys:
    """``model.*`` keys of MeKi (``model.memory=meki``; its width is ``model.d_mem``)."""
    meki_static: bool = True  # the static memory M (eq. 1)
    meki_dynamic: bool = True  # the dynamic projection G(E) (eq. 2)
    meki_projection: str = "swiglu"  # PROJECTIONS
    meki_fusion: str = "add_sigmoid"  # FUSIONS
    meki_position: str = "parallel_ffn"  # POSITIONS
    meki_folded: bool = False  # the inference form (a table per layer; fold_meki)


def _validate(c) -> None:
    m = c.model
    if m.memory != "meki":
        return
    PROJECTIONS.check(m.meki_projection)
    FUSIONS.check(m.meki_fusion)
    POSITIONS.check(m.meki_position)
    if not (m.meki_static or m.meki_dynamic or m.meki_folded):
        raise ConfigError("model.meki_static and model.meki_dynamic are both off, so MeKi has no memory; "
                          "switch one on or set model.memory=none")


def _branch(cfg, layer: int):
    """MeKi's residual branch in layer ``layer``: at its position's site, from the site's input
    (``ctx["meki_rows"]``, when given, is this layer's slice [B, T, d_mem])."""
    place = POSITIONS.get(cfg.meki_position)

    def apply(x_BTD, ctx):
        if place.own_norm:
            x_BTD = RMSNorm(cfg.norm_eps, "norm", cfg.param_dtype, name="meki_norm")(x_BTD)
        rows = ctx.get("meki_rows")
        return MeKi(cfg.vocab_size, cfg.d_mem, cfg.meki_static, cfg.meki_dynamic, cfg.meki_projection,
                    cfg.meki_fusion, cfg.meki_folded, cfg.norm_eps, cfg.init_std, cfg.dtype, cfg.param_dtype,
                    name="meki")(x_BTD, ctx["tokens"], ctx["embedded"], rows)
    return {place.site: apply}


def _prepare(cfg, ctx: dict) -> None:
    if ctx.get("meki_rows") is not None and not cfg.meki_folded:
        raise ValueError("meki_rows only apply to a folded MeKi model; fold it with fold_meki first")


FOLD_CHUNK = 16_384  # vocabulary rows per evaluation of G (bounds memory at paper vocabularies)


class FoldError(InferenceFormError):
    """The tree cannot be folded (not MeKi, already folded, or a scanned stack)."""


def expert_module(cfg) -> MeKiExpert:
    return MeKiExpert(cfg.vocab_size, cfg.d_mem, cfg.meki_static, cfg.meki_dynamic, cfg.meki_projection,
                      cfg.norm_eps, cfg.init_std, cfg.dtype, cfg.param_dtype)


@partial(jax.jit, static_argnums=0)
def _expert_rows(module: MeKiExpert, p, ids_N, emb_ND):
    return module.apply({"params": p}, ids_N[None], emb_ND[None])[0]


def fold_table(cfg, expert_params, embedding_VD):
    """``M~`` [V, d_mem] for one layer, computed in chunks of the vocabulary (compiled once per shape)."""
    module = expert_module(cfg)
    V = embedding_VD.shape[0]
    parts = [_expert_rows(module, expert_params, jnp.arange(s, min(s + FOLD_CHUNK, V)),
                          embedding_VD[s:s + FOLD_CHUNK])
             for s in range(0, V, FOLD_CHUNK)]
    return jnp.concatenate(parts, axis=0).astype(jnp.dtype(cfg.param_dtype))


def fold_meki(params: Mapping, cfg) -> tuple[dict, object]:
    """``(inference_params, inference_cfg)`` for a training-form MeKi model with per-layer params
    (``layers_i/...``); ``params`` is unchanged. Scanned stacks go through
    :func:`edge_jax.models.inference.inference_form`."""
    if cfg.memory != "meki":
        raise FoldError(f"model.memory={cfg.memory!r} has no MeKi memory to fold; fold a MeKi model")
    if cfg.scan_layers:
        raise FoldError("fold_meki folds per-layer params; fold a scanned model (model.scan_layers) with "
                        "edge_jax.models.inference.inference_form")
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


def folded_config(cfg):
    """The inference-form config of a MeKi model: the same with ``meki_folded=True``."""
    return dataclasses.replace(cfg, meki_folded=True)


SECTIONS.register("meki", Section("model", MeKiKeys, _validate))
MEMORY_KINDS.register("meki", MemoryKind(_branch, prepare=_prepare, accepts=("meki_rows",),
                                         per_layer=("meki_rows",), inference_form=fold_meki,
                                         inference_config=folded_config))
