"""MoE router kinds (``model.moe_router``): router logits -> top-k experts and their combine weights.

Each kind is a pure function ``route(logits_BTE, top_k, renormalize, p: RouterParams) -> Routed`` on
float32 logits, registered in :data:`ROUTERS`; :class:`~edge_jax.layers.moe.layer.MoE` calls it.
``Routed`` holds the experts ``ids`` [B,T,J], their router probabilities ``probs`` (softmax of the
logits at ``ids``, the order ``ids`` come in), the combine ``weights`` [B,T,J] and the full softmax
``probs_BTE`` (the load-balancing loss's P). Every kind multiplies its weights by ``p.routed_scale``.

- ``softmax``: top-k of the softmax; weights are those probabilities, divided by their sum with
  ``renormalize`` (Mixtral always, Qwen3-MoE and OLMoE with ``norm_topk_prob``; DeepSeek-V2's
  ``topk_method="greedy"``).
- ``sparsemixer``: PhiMoE's eval-mode SparseMixer top-2 (transformers' ``phimoe.sparsemixer`` with
  ``training=False``): the first expert is the argmax of the logits and its weight its softmax
  probability among the logits within a relative ``2 * jitter_eps`` of the max (the others masked);
  the second likewise over the logits without the first. ``renormalize`` is not used.
- ``group_limited``: DeepSeek-V2's ``group_limited_greedy``: the E experts form ``n_group`` groups of
  consecutive ids; a group scores its largest softmax probability, the ``topk_group`` best groups
  stay, and the top-k of the softmax over their experts (the others read 0) are chosen; weights are
  those probabilities (divided by their sum with ``renormalize``).

:func:`route_reference` is all of them per token in numpy (the tests' reference).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.registry import Registry


@dataclasses.dataclass(frozen=True)
class RouterParams:
    """The routers' settings besides ``top_k``/``renormalize`` (``model.moe_*`` keys of the same names:
    ``moe_jitter_eps``, ``moe_n_group``, ``moe_topk_group``, ``moe_routed_scale``)."""
    jitter_eps: float = 0.01
    n_group: int = 1
    topk_group: int = 1
    routed_scale: float = 1.0

    @classmethod
    def of(cls, cfg) -> "RouterParams":
        """From a ModelConfig."""
        return cls(cfg.moe_jitter_eps, cfg.moe_n_group, cfg.moe_topk_group, cfg.moe_routed_scale)


class Routed(NamedTuple):
    ids: jax.Array        # [B, T, J] int32
    weights: jax.Array    # [B, T, J] combine weights
    probs: jax.Array      # [B, T, J] softmax probabilities of the chosen experts
    probs_BTE: jax.Array  # [B, T, E] the full softmax (load-balancing loss)


ROUTERS: Registry[Callable[..., Routed]] = Registry("MoE router", key="model.moe_router")


def _normalized(w, renormalize: bool):
    return w / jnp.sum(w, -1, keepdims=True) if renormalize else w


@ROUTERS.register("softmax")
def softmax(logits_BTE, top_k: int, renormalize: bool, p: RouterParams) -> Routed:
    probs_BTE = jax.nn.softmax(logits_BTE.astype(jnp.float32), axis=-1)
    top_p, ids = jax.lax.top_k(probs_BTE, top_k)
    return Routed(ids, _normalized(top_p, renormalize) * p.routed_scale, top_p, probs_BTE)


def _sparsemixer_step(scores, masked, eps: float):
    """One SparseMixer pick: the argmax of ``masked``, and its softmax weight over the entries of
    ``masked`` within a relative ``2 eps`` of that max (``factor = max(|scores|, max)``)."""
    top = jnp.max(masked, -1, keepdims=True)
    idx = jnp.argmax(masked, -1)[..., None]
    drop = (top - scores) / jnp.maximum(jnp.abs(scores), top) > 2 * eps
    gates = jax.nn.softmax(jnp.where(drop, -jnp.inf, masked), axis=-1)
    return idx, jnp.take_along_axis(gates, idx, -1)


@ROUTERS.register("sparsemixer")
def sparsemixer(logits_BTE, top_k: int, renormalize: bool, p: RouterParams) -> Routed:
    if top_k != 2:
        raise ValueError(f"the sparsemixer router picks 2 experts, got top_k={top_k}")
    scores = logits_BTE.astype(jnp.float32)
    id1, w1 = _sparsemixer_step(scores, scores, p.jitter_eps)
    rest = jnp.where(jnp.arange(scores.shape[-1]) == id1, -jnp.inf, scores)
    id2, w2 = _sparsemixer_step(scores, rest, p.jitter_eps)
    ids = jnp.concatenate([id1, id2], -1).astype(jnp.int32)
    probs_BTE = jax.nn.softmax(scores, axis=-1)
    return Routed(ids, jnp.concatenate([w1, w2], -1) * p.routed_scale, jnp.take_along_axis(probs_BTE, ids, -1),
                  probs_BTE)


@ROUTERS.register("group_limited")
def group_limited(logits_BTE, top_k: int, renormalize: bool, p: RouterParams) -> Routed:
    probs_BTE = jax.nn.softmax(logits_BTE.astype(jnp.float32), axis=-1)
    *lead, e = probs_BTE.shape
    grouped = probs_BTE.reshape(*lead, p.n_group, e // p.n_group)
    _, groups = jax.lax.top_k(jnp.max(grouped, -1), p.topk_group)
    keep = jnp.any(jnp.arange(p.n_group)[:, None] == groups[..., None, :], -1)  # [..., n_group]
    masked = jnp.where(keep[..., None], grouped, 0.0).reshape(*lead, e)
    top_p, ids = jax.lax.top_k(masked, top_k)
    return Routed(ids, _normalized(top_p, renormalize) * p.routed_scale, top_p, probs_BTE)


def route_reference(logits_NE, kind: str, top_k: int, renormalize: bool, p: RouterParams):
    """``(ids, weights)`` [N, J] per token with numpy loops (float64): the definition of each kind."""
    logits = np.asarray(logits_NE, np.float64)
    n, e = logits.shape
    ids, weights = np.zeros((n, top_k), np.int64), np.zeros((n, top_k))

    def soft(v):
        z = np.exp(v - np.max(v))
        return z / z.sum()

    for t in range(n):
        s = logits[t]
        if kind == "sparsemixer":
            masked = s.copy()
            for j in range(top_k):
                i = int(np.argmax(masked))
                top = masked[i]
                drop = np.array([(top - x) / max(abs(x), top) > 2 * p.jitter_eps for x in s])
                ids[t, j], weights[t, j] = i, soft(np.where(drop, -np.inf, masked))[i]
                masked[i] = -np.inf
        else:
            prob = soft(s)
            if kind == "group_limited":
                size = e // p.n_group
                best = sorted(range(p.n_group), key=lambda g: -prob[g * size:(g + 1) * size].max())[:p.topk_group]
                prob = np.array([prob[i] if i // size in best else 0.0 for i in range(e)])
            order = sorted(range(e), key=lambda i: -prob[i])[:top_k]
            ids[t], weights[t] = order, prob[order]
            if renormalize:
                weights[t] /= weights[t].sum()
    return ids, weights * p.routed_scale
