"""ScoutGate: a small learned forecast of which experts every MoE layer activates (paper §4.2).

For token t, before any layer runs, ScoutGate reads the last m tokens of t's sequence (t itself last;
positions before the sequence start are padding) and, for every MoE layer l and expert e, outputs
an independent probability p_{e,l} = sigmoid(s_{e,l}):

1. e_i = the main model's frozen token embedding of tok_i (a constant, never trained);
2. z_i = LN(e_i W_proj + b) in R^{d_proj} (LayerNorm, learnable scale/bias, eps 1e-5); z_i = 0 at padding;
3. z_ctx = [z_{t-m+1} || ... || z_t || z_l], z_l = Emb_layer(l) in R^{d_layer};
   h_l = z_ctx, or a linear compression of it to d_hidden when ``d_hidden > 0``;
4. two-tower head: s_{e,l} = (W_h h_l)^T (W_e v_{e,l}) + b_{e,l}, v_{e,l} a per-layer expert embedding.

A linear map of the concatenation [z_ctx || z_l] is computed as (context part) + (layer part), so the
m*d_proj context features are mapped once per token, not once per (token, layer).
Training (:func:`train_scoutgate`) minimises BCE against the k-hot router choice (mean over token,
layer, expert) + card_weight * mean over (token, layer) of (sum_e p_{e,l} - k)^2, with AdamW.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from edge_jax.data.routing_trace import RECORD_HINT, RoutingTrace
from edge_jax.utils.atomic import atomic_open


@dataclasses.dataclass(frozen=True)
class ScoutGateConfig:
    m: int = 8               # context tokens, the current one included
    d_proj: int = 128        # width of each projected token z_i
    d_layer: int = 32        # layer embedding width
    d_expert: int = 32       # expert embedding width
    d_rank: int = 64         # d' of the low-rank two-tower maps W_h, W_e
    d_hidden: int = 0        # > 0: compress h_l to this width first
    steps: int = 1500
    batch: int = 256
    lr: float = 3e-3
    weight_decay: float = 1e-4
    card_weight: float = 0.1
    eval_tokens: int = 4096  # held-in tokens used for the loss printed while training


class ScoutGate(nn.Module):
    n_layers: int
    n_experts: int
    cfg: ScoutGateConfig = ScoutGateConfig()

    @nn.compact
    def __call__(self, ctx_emb_BWD, ctx_mask_BW):
        """Logits ``[B, L, E]`` from the context tokens' embeddings ``[B, W, D]`` (W = ``cfg.m``) and
        their validity ``[B, W]``. The model's own widths have no shape letter; comments give them."""
        c, L, E = self.cfg, self.n_layers, self.n_experts
        B, W, _ = ctx_emb_BWD.shape
        x_BWD = ctx_emb_BWD.astype(jnp.float32)
        z = nn.LayerNorm(epsilon=1e-5, name="proj_ln")(nn.Dense(c.d_proj, name="proj")(x_BWD))  # [B, W, d_proj]
        z = jnp.where(ctx_mask_BW[..., None], z, 0.0)
        z_ctx = z.reshape(B, W * c.d_proj)
        z_layer = nn.Embed(L, c.d_layer, name="layer_emb")(jnp.arange(L))  # [L, d_layer]
        # a linear map of [z_ctx || z_l] = W_ctx z_ctx + W_layer z_l (module docstring)
        width = c.d_hidden if c.d_hidden > 0 else c.d_rank
        h_ctx = nn.Dense(width, use_bias=c.d_hidden > 0, name="h_ctx")(z_ctx)  # [B, width]
        h_layer = nn.Dense(width, use_bias=False, name="h_layer")(z_layer)  # [L, width]
        h = h_ctx[:, None, :] + h_layer[None, :, :]  # [B, L, width]
        q = nn.Dense(c.d_rank, use_bias=False, name="W_h")(h) if c.d_hidden > 0 else h  # [B, L, d_rank]
        v = self.param("expert_emb", nn.initializers.normal(0.05), (L, E, c.d_expert))
        k = nn.Dense(c.d_rank, use_bias=False, name="W_e")(v)  # [L, E, d_rank]
        b_LE = self.param("expert_bias", nn.initializers.zeros, (L, E))
        return jnp.einsum("blr,ler->ble", q, k) + b_LE[None]


def context_ids(tokens, seq_starts, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of each token's m-token context, oldest first, and which of them are real.

    Returns ``ids`` int32 [N, m] (``ids[t, -1] == tokens[t]``; padding positions hold 0) and
    ``valid`` bool [N, m]; a context never reaches before the start of its own sequence.
    """
    tokens = np.asarray(tokens, np.int32)
    n = tokens.shape[0]
    if n == 0:
        return np.zeros((0, m), np.int32), np.zeros((0, m), bool)
    pos_N = np.arange(n)
    starts = np.asarray(seq_starts, np.int64)
    start_N = starts[np.searchsorted(starts, pos_N, side="right") - 1]
    src_NW = pos_N[:, None] - (m - 1) + np.arange(m)[None, :]
    valid_NW = src_NW >= start_N[:, None]
    ids_NW = np.where(valid_NW, tokens[np.maximum(src_NW, 0)], 0).astype(np.int32)
    return ids_NW, valid_NW


def k_hot(experts_NLJ, n_experts: int) -> np.ndarray:
    """float32 [N, L, E]: 1 for the experts the router picked, else 0."""
    experts_NLJ = np.asarray(experts_NLJ)
    out_NLE = np.zeros((*experts_NLJ.shape[:-1], n_experts), np.float32)
    np.put_along_axis(out_NLE, experts_NLJ.astype(np.int64), 1.0, axis=-1)
    return out_NLE


def scoutgate_loss(logits_BLE, target_BLE, top_k: int, card_weight: float):
    """BCE (mean over every token, layer, expert) + card_weight * mean_{B,L} (sum_e p - k)^2."""
    logits_BLE = logits_BLE.astype(jnp.float32)
    bce = optax.sigmoid_binary_cross_entropy(logits_BLE, target_BLE.astype(jnp.float32)).mean()
    card = jnp.square(jax.nn.sigmoid(logits_BLE).sum(-1) - top_k).mean()
    return bce + card_weight * card, {"bce": bce, "card": card}


def _need_embeddings(trace: RoutingTrace) -> jnp.ndarray:
    if trace.embeddings is None:
        raise ValueError(f"ScoutGate needs the model's token embeddings but this routing trace has "
                         f"none; {RECORD_HINT}")
    return jnp.asarray(trace.embeddings, jnp.float32)


def _decay_mask(params):
    return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)


@functools.lru_cache(maxsize=8)
def _compiled(n_layers: int, n_experts: int, cfg: ScoutGateConfig, top_k: int):
    """(model, optimizer, jitted train_step, eval_loss, probs) for one model; cached for reuse."""
    model = ScoutGate(n_layers, n_experts, cfg)
    opt = optax.adamw(_schedule(cfg), weight_decay=cfg.weight_decay, mask=_decay_mask)

    def loss_fn(params, emb_VD, ids_BW, valid_BW, experts_BLJ):
        logits_BLE = model.apply(params, emb_VD[ids_BW], valid_BW)
        target_BLE = jax.nn.one_hot(experts_BLJ, n_experts, dtype=jnp.float32).sum(-2)
        return scoutgate_loss(logits_BLE, target_BLE, top_k, cfg.card_weight)

    def train_step(params, opt_state, emb_VD, ids_BW, valid_BW, experts_BLJ):
        (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, emb_VD, ids_BW, valid_BW, experts_BLJ)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, aux

    def probs(params, emb_VD, ids_BW, valid_BW):
        return jax.nn.sigmoid(model.apply(params, emb_VD[ids_BW], valid_BW))

    return model, opt, jax.jit(train_step), jax.jit(lambda *a: loss_fn(*a)[1]), jax.jit(probs)


def _schedule(cfg: ScoutGateConfig):
    """Linear warmup over the first 5% of steps, then cosine decay to 5% of the peak rate."""
    warmup = max(1, min(100, cfg.steps // 20))
    return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup, max(cfg.steps, warmup + 1),
                                              end_value=0.05 * cfg.lr)


def init_params(n_layers: int, n_experts: int, top_k: int, cfg: ScoutGateConfig, d_embed: int,
                seed: int = 0):
    """Fresh parameters; the expert bias starts at logit(k/E), so sum_e p starts near k."""
    model = ScoutGate(n_layers, n_experts, cfg)
    params = model.init(jax.random.PRNGKey(seed), jnp.zeros((1, cfg.m, d_embed), jnp.float32),
                        jnp.ones((1, cfg.m), bool))
    prior = float(np.log(top_k / max(n_experts - top_k, 1e-3)))
    inner = dict(params["params"])
    inner["expert_bias"] = jnp.full((n_layers, n_experts), prior, jnp.float32)
    return {"params": inner}


def train_scoutgate(trace: RoutingTrace, cfg: ScoutGateConfig = ScoutGateConfig(), seed: int = 0,
                    log=print):
    """Train ScoutGate on random token positions of `trace`; returns ``(params, info)``.

    ``info``: ``bce`` and ``card`` (final loss on `cfg.eval_tokens` held-in tokens), ``steps``,
    ``wall_s``, ``history`` (every logged ``{"step", "bce", "card"}``) and ``config``.
    """
    emb_VD = _need_embeddings(trace)
    if trace.n_tokens == 0:
        raise ValueError("cannot train ScoutGate on an empty routing trace")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    ids_NW, valid_NW = context_ids(trace.tokens, trace.seq_starts, cfg.m)
    experts_NLJ = trace.experts.astype(np.int32)
    _, opt, train_step, eval_loss, _ = _compiled(trace.n_layers, trace.n_experts, cfg, trace.top_k)
    params = init_params(trace.n_layers, trace.n_experts, trace.top_k, cfg, emb_VD.shape[1], seed)
    opt_state = opt.init(params)
    ev = rng.choice(trace.n_tokens, min(cfg.eval_tokens, trace.n_tokens), replace=False)
    eval_args = (emb_VD, ids_NW[ev], valid_NW[ev], experts_NLJ[ev])
    log_every, history = max(1, cfg.steps // 10), []

    def evaluate(step):
        aux = {k: float(v) for k, v in eval_loss(params, *eval_args).items()}
        history.append({"step": step, **aux})
        log(f"scoutgate step {step:5d}/{cfg.steps}  bce {aux['bce']:.4f}  card {aux['card']:.4f}"
            f"  ({time.perf_counter() - t0:.1f}s)")

    evaluate(0)
    for step in range(1, cfg.steps + 1):
        idx = rng.integers(0, trace.n_tokens, cfg.batch)
        params, opt_state, _ = train_step(params, opt_state, emb_VD, ids_NW[idx], valid_NW[idx],
                                          experts_NLJ[idx])
        if step % log_every == 0 or step == cfg.steps:
            evaluate(step)
    params = jax.tree_util.tree_map(np.asarray, params)
    info = {"bce": history[-1]["bce"], "card": history[-1]["card"], "steps": cfg.steps,
            "wall_s": time.perf_counter() - t0, "history": history, "config": dataclasses.asdict(cfg)}
    return params, info


def predict(params, trace: RoutingTrace, cfg: ScoutGateConfig = ScoutGateConfig(),
            batch: int = 4096) -> np.ndarray:
    """float32 [N, L, E]: ScoutGate's activation probability of every expert for every token."""
    emb_VD = _need_embeddings(trace)
    n, L, E = trace.n_tokens, trace.n_layers, trace.n_experts
    ids_NW, valid_NW = context_ids(trace.tokens, trace.seq_starts, cfg.m)
    probs_fn = _compiled(L, E, cfg, trace.top_k)[-1]
    params = jax.device_put(params)
    out_NLE = np.empty((n, L, E), np.float32)
    for a in range(0, n, batch):
        b = min(a + batch, n)
        ids_BW = np.zeros((batch, cfg.m), np.int32)  # fixed batch shape: one compilation
        valid_BW = np.zeros((batch, cfg.m), bool)
        ids_BW[: b - a], valid_BW[: b - a] = ids_NW[a:b], valid_NW[a:b]
        out_NLE[a:b] = np.asarray(probs_fn(params, emb_VD, ids_BW, valid_BW))[: b - a]
    return out_NLE


def recall_at_k(probs_NLE, experts_NLJ) -> float:
    """Mean over (token, layer) of the fraction of the router's top-k among the k most probable."""
    experts_NLJ = np.asarray(experts_NLJ)
    k = experts_NLJ.shape[-1]
    if experts_NLJ.size == 0:
        return float("nan")
    top_NLJ = np.argpartition(-np.asarray(probs_NLE), k - 1, axis=-1)[..., :k]
    hits_NLJ = (top_NLJ[..., :, None] == experts_NLJ[..., None, :]).any(-1)
    return float(hits_NLJ.mean())


def save_params(path, params, meta: dict | None = None) -> None:
    """Write params (flattened to ``a/b/c`` keys) and JSON `meta` to one ``.npz``, atomically."""
    flat = traverse_util.flatten_dict(params, sep="/")
    arrays = {f"p/{k}": np.asarray(v, np.float32) for k, v in flat.items()}
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.array(json.dumps(meta or {})), **arrays)
    with atomic_open(path, "wb") as f:
        f.write(buf.getvalue())


def load_params(path):
    """Read a file written by :func:`save_params`; returns ``(params, meta)``."""
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["__meta__"]))
        flat = {k[2:]: z[k] for k in z.files if k.startswith("p/")}
    return traverse_util.unflatten_dict(flat, sep="/"), meta
