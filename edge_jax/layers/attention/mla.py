"""Multi-head latent attention (PLM Appendix D, eqs. 8-17; DeepSeek-V2's MLA).

Per token t and head i, with d_c = ``kv_lora_rank``, K = ``head_dim`` (d_nope, also the value
width), R = ``d_rope`` and I = K + R (the width of a whole query or key head)::

    c_t     = RMSNorm(W_DKV h_t)                       [d_c]      (8)  the cached latent
    k_t^C,i = W_UK,i c_t,   v_t^C,i = W_UV,i c_t       [K]        (9, 15)
    k_t^R   = RoPE(W_KR h_t)                            [R]        (10) shared by all heads, cached
    q_t,i   = [W_Q,i h_t ; RoPE(W_QR,i h_t)]            [K + R]    (12-14) full rank (PLM)
    o_t,i   = sum_j softmax_j(q_t,i . [k_j^C,i ; k_j^R] / sqrt(K + R)) v_j^C,i         (16)
    u_t     = W_O [o_t,1; ...; o_t,H]                                                  (17)

``q_lora_rank`` > 0 adds DeepSeek-V2's query compression (``q_down`` -> RMSNorm -> ``q_up``). Under YaRN with
``model.rope_mscale_all_dim`` the softmax scale is multiplied by ``Rope.softmax_scale`` (DeepSeek-V2's
``yarn_get_mscale(factor, mscale_all_dim)**2``), applied to the query.
Params: ``q_proj`` [D, H, K+R] (or ``q_down`` [D, r_q], ``q_norm``, ``q_up`` [r_q, H, K+R]),
``kv_down`` [D, d_c], ``kv_norm`` [d_c], ``k_rope_proj`` [D, R], ``k_up`` / ``v_up`` [d_c, H, K],
``o_proj`` [H, K, D].

The layer's KV cache (``context``: its explicit per-layer cache, :mod:`edge_jax.infer.kv_state`)
holds only the latent ``c_kv`` [B, S, d_c] and the shared RoPE key ``k_rope`` [B, S, R] (placed
and rotated like GQA's keys, :func:`edge_jax.layers.attention.cached.join_cache`): (d_c + R) values
per token instead of GQA's 2 G K (eqs. 6-7). Two ways to attend over it, the same numbers up to rounding:

* naive (``absorb=False``, :func:`expanded_attention`): decompress every cached latent into
  per-head keys and values each step;
* absorbed (``absorb=True``, :func:`latent_attention`): fold W_UK into the query
  (q~_i = W_UK,i^T q_i^C, a d_c vector) and W_UV into the output, so attention runs in the latent
  space and nothing is decompressed. It is used for one-token decode steps only; prefill blocks and
  training keep the naive form. On a plain cache (slot p holds position p, filled from slot 0) the
  step reads only the filled slots (:func:`latent_decode`): flash-decoding in XLA
  (``model.kernels=xla``) or the Pallas kernel ``mla_decode`` (:mod:`edge_jax.layers.kernels.mla_decode`).

:func:`mla_attention_reference` is eq. 16 written out per head and query.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.attention.cached import cache_votes, join_cache
from edge_jax.layers.attention.dot import causal_mask, dot_product_attention
from edge_jax.layers.attention.gqa import dense_general
from edge_jax.layers.kernels import backend
from edge_jax.layers.kernels.mla_decode import mla_decode, mla_decode_xla
from edge_jax.layers.norms import RMSNorm
from edge_jax.layers.rope import Rope
from edge_jax.sharding import per_shard


def latent_attention(q_nope_BTHK, q_rope_BTHR, latent_BSC, k_rope_BSR, w_uk_CHK, w_uv_CHK, mask_BTS):
    """Absorbed attention: scores and the weighted sum both in the d_c latent space."""
    K, R = q_nope_BTHK.shape[-1], q_rope_BTHR.shape[-1]
    q_lat_BTHC = jnp.einsum("bthk,chk->bthc", q_nope_BTHK, w_uk_CHK)
    scores = (jnp.einsum("bthc,bsc->bhts", q_lat_BTHC, latent_BSC, preferred_element_type=jnp.float32)
              + jnp.einsum("bthr,bsr->bhts", q_rope_BTHR, k_rope_BSR, preferred_element_type=jnp.float32))
    scores = scores / jnp.sqrt(jnp.float32(K + R))
    scores = jnp.where(mask_BTS[:, None], scores, jnp.finfo(jnp.float32).min)
    probs = nn.softmax(scores, axis=-1).astype(latent_BSC.dtype)
    o_lat_BTHC = jnp.einsum("bhts,bsc->bthc", probs, latent_BSC)
    return jnp.einsum("bthc,chk->bthk", o_lat_BTHC, w_uv_CHK)


def latent_decode(q_nope_B1HK, q_rope_B1HR, latent_BSC, k_rope_BSR, w_uk_CHK, w_uv_CHK, length_B,
                  kernels: str = "xla"):
    """Absorbed attention of one query token per row over the first ``length_B`` slots of a cache
    (the same numbers as :func:`latent_attention` under that mask, up to rounding), reading only
    those: ``[B, 1, H, K]``. ``kernels``: ``model.kernels`` (the Pallas kernel or XLA flash-decoding)."""
    K, R = q_nope_B1HK.shape[-1], q_rope_B1HR.shape[-1]
    q_lat_BHC = jnp.einsum("bhk,chk->bhc", q_nope_B1HK[:, 0], w_uk_CHK)
    scale = float(1 / np.sqrt(K + R))
    if backend.use_pallas(kernels, "mla_decode"):  # per device on its rows: XLA cannot partition the call
        rows = ("batch", None, None)
        decode = per_shard(functools.partial(mla_decode, scale=scale), (rows, rows, rows, rows, ("batch",)), rows)
    else:
        decode = functools.partial(mla_decode_xla, scale=scale)
    o_lat_BHC = decode(q_lat_BHC, q_rope_B1HR[:, 0], latent_BSC, k_rope_BSR, length_B)
    return jnp.einsum("bhc,chk->bhk", o_lat_BHC, w_uv_CHK)[:, None]


def expanded_attention(q_nope_BTHK, q_rope_BTHR, latent_BSC, k_rope_BSR, w_uk_CHK, w_uv_CHK, mask_BTS,
                       return_probs: bool = False):
    """Naive attention: decompress every latent into per-head keys and values, then plain softmax
    (``return_probs``: also the probabilities [B, H, 1, T, S], as :func:`dot_product_attention`)."""
    H = q_nope_BTHK.shape[2]
    k_nope_BSHK = jnp.einsum("bsc,chk->bshk", latent_BSC, w_uk_CHK)
    v_BSHK = jnp.einsum("bsc,chk->bshk", latent_BSC, w_uv_CHK)
    k_rope_BSHR = jnp.broadcast_to(k_rope_BSR[:, :, None], k_rope_BSR.shape[:2] + (H, k_rope_BSR.shape[-1]))
    q_BTHI = jnp.concatenate([q_nope_BTHK, q_rope_BTHR], axis=-1)
    k_BSHI = jnp.concatenate([k_nope_BSHK, k_rope_BSHR.astype(k_nope_BSHK.dtype)], axis=-1)
    return dot_product_attention(q_BTHI, k_BSHI, v_BSHK, mask_BTS, return_probs=return_probs)


def mla_attention_reference(q_nope_BTHK, q_rope_BTHR, latent_BSC, k_rope_BSR, w_uk_CHK, w_uv_CHK, mask_BTS):
    """Eq. 16 per row, head and query in float64 numpy: keys [W_UK,i c_j ; k_j^R], values W_UV,i c_j,
    a plain softmax over the allowed slots scaled by 1/sqrt(K + R)."""
    qn, qr, lat, kr, wk, wv, mask = (np.asarray(jnp.asarray(a, jnp.float32), np.float64) for a in (
        q_nope_BTHK, q_rope_BTHR, latent_BSC, k_rope_BSR, w_uk_CHK, w_uv_CHK, mask_BTS))
    B, T, H, K = qn.shape
    R = qr.shape[-1]
    out = np.zeros((B, T, H, wv.shape[-1]))
    for b in range(B):
        for i in range(H):
            keys = np.concatenate([lat[b] @ wk[:, i], kr[b]], axis=-1)  # [S, K + R]
            values = lat[b] @ wv[:, i]
            for t in range(T):
                scores = keys @ np.concatenate([qn[b, t, i], qr[b, t, i]]) / np.sqrt(K + R)
                scores = np.where(mask[b, t] > 0, scores, -np.inf)
                p = np.exp(scores - scores.max())
                out[b, t, i] = (p / p.sum()) @ values
    return jnp.asarray(out, jnp.asarray(latent_BSC).dtype)


class MLAttention(nn.Module):
    n_heads: int
    head_dim: int          # d_nope: per-head key (content part) and value width
    d_rope: int
    kv_lora_rank: int      # d_c
    q_lora_rank: int = 0   # 0: full-rank query (PLM)
    rope: Rope = Rope()
    absorb: bool = False
    norm_eps: float = 1e-6
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    kernels: str = "xla"  # model.kernels (edge_jax.layers.kernels.backend)

    def _query(self, x_BTD, dense):
        H, K, R = self.n_heads, self.head_dim, self.d_rope
        if not self.q_lora_rank:
            return dense((H, K + R), ("embed", "heads", "head_dim"), "q_proj")(x_BTD)
        c_q = dense(self.q_lora_rank, ("embed", "kv_lora"), "q_down")(x_BTD)
        c_q = RMSNorm(self.norm_eps, "kv_lora", self.param_dtype, name="q_norm")(c_q)
        return dense((H, K + R), ("kv_lora", "heads", "head_dim"), "q_up")(c_q)

    @nn.compact
    def __call__(self, x_BTD, positions_BT, context: dict | None = None):
        H, K, R, C = self.n_heads, self.head_dim, self.d_rope, self.kv_lora_rank
        dt, pdt = jnp.dtype(self.dtype), jnp.dtype(self.param_dtype)

        def dense(features, axes, name, in_axes=-1):
            return dense_general(features, axes, name, self.init_std, dt, pdt, in_axes)

        q_BTHI = self._query(x_BTD, dense)
        if (s := self.rope.softmax_scale) != 1.0:  # DeepSeek-V2 under YaRN: softmax scale * mscale^2
            q_BTHI = q_BTHI * jnp.asarray(s, q_BTHI.dtype)
        q_nope_BTHK = q_BTHI[..., :K]
        q_rope_BTHR = self.rope.apply(q_BTHI[..., K:], positions_BT)
        latent_BTC = RMSNorm(self.norm_eps, "kv_lora", self.param_dtype, name="kv_norm")(
            dense(C, ("embed", "kv_lora"), "kv_down")(x_BTD))
        k_rope_BTR = dense(R, ("embed", "head_dim"), "k_rope_proj")(x_BTD)  # before RoPE
        w_uk_CHK = self.param("k_up", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                   ("kv_lora", "heads", "head_dim")), (C, H, K), pdt)
        w_uv_CHK = self.param("v_up", nn.with_logical_partitioning(nn.initializers.normal(self.init_std),
                                                                   ("kv_lora", "heads", "head_dim")), (C, H, K), pdt)
        w_uk_CHK, w_uv_CHK = jnp.asarray(w_uk_CHK, dt), jnp.asarray(w_uv_CHK, dt)
        if context is None:
            k_rope_BTR = self.rope.apply(k_rope_BTR[:, :, None], positions_BT)[:, :, 0]
            o_BTHK = expanded_attention(q_nope_BTHK, q_rope_BTHR, latent_BTC, k_rope_BTR, w_uk_CHK, w_uv_CHK,
                                        causal_mask(positions_BT, positions_BT))
        else:
            o_BTHK = self._over_cache(q_nope_BTHK, q_rope_BTHR, latent_BTC, k_rope_BTR, w_uk_CHK, w_uv_CHK,
                                      positions_BT, context)
        return dense(x_BTD.shape[-1], ("heads", "head_dim", "embed"), "o_proj", in_axes=(-2, -1))(o_BTHK)

    def _over_cache(self, q_nope_BTHK, q_rope_BTHR, latent_BTC, k_rope_BTR, w_uk_CHK, w_uv_CHK, positions_BT, ctx):
        """A chunk over the latent cache; sows what the cache keeps (``c_kv``, ``k_rope``; see
        :func:`edge_jax.layers.attention.cached.join_cache`) and on request SnapKV votes."""
        T = latent_BTC.shape[1]
        joined, mask_BGTS, stored = join_cache(ctx, {"c_kv": latent_BTC, "k_rope": k_rope_BTR}, positions_BT,
                                               self.rope, rotate="k_rope")
        args = (q_nope_BTHK, q_rope_BTHR, joined["c_kv"], joined["k_rope"], w_uk_CHK, w_uv_CHK, mask_BGTS[:, 0])
        window = int(ctx.get("votes", 0))
        # Absorbed only for one-token decode steps: with many queries (prefill) decompressing once is
        # cheaper than attending in d_c per query-key pair (H (2 d_c + R) vs H (2 K + R) multiply-adds).
        if self.absorb and T == 1 and not window and "pos" not in ctx:
            # plain cache: slots 0 .. position are the filled ones (join_cache's mask), read only those
            o_BTHK = latent_decode(*args[:-1], positions_BT[:, 0] + 1, self.kernels)
        elif self.absorb and T == 1 and not window:
            o_BTHK = latent_attention(*args)
        elif window:
            o_BTHK, probs = expanded_attention(*args, return_probs=True)
            self.sow("intermediates", "votes", cache_votes(probs, 1, window, ctx.get("votes_end", T)))
        else:
            o_BTHK = expanded_attention(*args)
        for name, value in stored.items():
            self.sow("intermediates", name, value)
        return o_BTHK
