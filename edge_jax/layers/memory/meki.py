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

Inference form (eqs. 9-14): everything in ``e`` depends on the token id only, so
:func:`edge_jax.models.fold.fold_meki` evaluates :class:`MeKiExpert` on the whole vocabulary
once and stores ``M~ = alpha * RMSNorm(M + beta * G(E))`` as ``table``. The folded branch
does a lookup ``M~[x_t]`` (or takes rows gathered on the host) and the two d_mem x d_model
matmuls. Both forms use the same :func:`fuse_and_project`, so they cannot drift apart.

The RMSNorm inside ``e`` keeps its per-feature scale, like every RMSNorm in the model
(Megatron's RMSNorm, which the paper's code base uses, has one); it folds into the table.
"""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from edge_jax.layers.ffn import dense
from edge_jax.layers.norms import RMSNorm

_ACTS = {"sigmoid": nn.sigmoid, "silu": nn.silu}


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
            m = jnp.take(memory, tokens_BT, axis=0).astype(jnp.dtype(self.dtype))
        if self.dynamic:
            x = embedded_BTD.astype(jnp.dtype(self.dtype))
            if self.projection == "swiglu":
                hidden = x.shape[-1] // 2
                gate = dense(hidden, ("embed", "mlp"), "proj_gate", *a)(x)
                up = dense(hidden, ("embed", "mlp"), "proj_up", *a)(x)
                dyn = dense(self.d_mem, ("mlp", "mem"), "proj_down", *a)(nn.silu(gate) * up)
            elif self.projection == "linear":
                dyn = dense(self.d_mem, ("embed", "mem"), "proj", *a)(x)
            else:
                raise ValueError(f"unknown MeKi projection {self.projection!r}; valid: swiglu, linear")
            m = m + _scalar(self, "beta") * dyn
        e = RMSNorm(self.norm_eps, "mem", self.param_dtype, name="norm")(m)
        return (_scalar(self, "alpha") * e).astype(jnp.dtype(self.dtype))


def fuse_and_project(e_BTM, h_BTD, fusion: str, norm_eps: float, init_std: float,
                     dtype: str, param_dtype: str):
    """Eqs. 4-6 (12-14): gate from ``h``, fuse with ``e``, project up and normalise. Called inside
    a compact module, whose parameters ``gate``, ``out`` and ``out_norm`` it creates."""
    a = (init_std, dtype, param_dtype)
    mode, _, act = fusion.partition("_")
    if mode not in ("add", "mul") or act not in _ACTS:
        raise ValueError(f"unknown MeKi fusion {fusion!r}; valid: add_sigmoid, mul_sigmoid, add_silu, mul_silu")
    g = _ACTS[act](dense(e_BTM.shape[-1], ("embed", "mem"), "gate", *a)(h_BTD))
    v = e_BTM + g if mode == "add" else e_BTM * g
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
            e = jnp.take(table, tokens_BT, axis=0).astype(jnp.dtype(self.dtype))
        return fuse_and_project(e, h_BTD, self.fusion, self.norm_eps, self.init_std, self.dtype,
                                self.param_dtype)
