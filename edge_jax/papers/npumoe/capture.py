"""One pass of a MoE model over batches: loss, next-token accuracy, routing and capacity statistics.

The MoE layers sow their routing (:mod:`edge_jax.layers.moe.layer`); :func:`routing_pass` runs the jitted
forward with those collections mutable and brings back, per MoE layer, the top-k ids and router
probabilities of every real token (padding targets left out), the summed token-copy counts, and on
request the layer inputs (for timing the runtime on real hidden states).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.models.inputs import model_kwargs
from edge_jax.train.step import token_losses

STAT_KEYS = ("routed", "kept", "dropped", "fallback", "padded")


@dataclasses.dataclass
class PassResult:
    loss_sum: float
    correct: float
    tokens: float
    ids: list          # per MoE layer: int [N, J] top-k expert ids of the real tokens
    probs: list        # per MoE layer: float [N, J]
    stats: dict        # token-copy counts summed over layers and batches (capacity strategies)
    inputs: list       # per batch, per MoE layer: (x [B*T, D], ids, weights, saliency) if kept
    tokens_seen: list  # per batch: int [B, T] inputs and bool [B, T] real-token mask

    @property
    def loss(self) -> float:
        return self.loss_sum / max(self.tokens, 1.0)

    @property
    def accuracy(self) -> float:
        return self.correct / max(self.tokens, 1.0)

    def ids_NLJ(self) -> np.ndarray:
        return np.stack(self.ids, axis=1)


@functools.lru_cache(maxsize=8)
def _forward(model):
    """The jitted forward of ``model`` (cached: a run makes several passes with the same model)."""
    layers = model.cfg.moe_layer_ids()

    def fwd(params, batch):
        logits, state = model.apply({"params": params}, batch["inputs"], **model_kwargs(batch),
                                    mutable=["intermediates"])
        inter = state["intermediates"]
        routing = [inter[f"layers_{i}"]["moe"]["routing"][0] for i in layers]
        stats = [inter[f"layers_{i}"]["moe"].get("moe_stats", ({},))[0] for i in layers]
        mask = batch["mask"]
        losses = token_losses(logits, batch["targets"])
        correct = (jnp.argmax(logits, -1) == batch["targets"]).astype(jnp.float32)
        return {"loss_sum": jnp.sum(losses * mask), "correct": jnp.sum(correct * mask), "tokens": jnp.sum(mask),
                "routing": routing, "stats": stats}

    return jax.jit(fwd)


def routing_pass(model, params, batches, keep_inputs: bool = False) -> PassResult:
    """Run ``model`` (a DecoderLM with MoE layers) over eval batches (with ``mask``)."""
    fwd = _forward(model)
    n_layers = len(model.cfg.moe_layer_ids())
    out = PassResult(0.0, 0.0, 0.0, [[] for _ in range(n_layers)], [[] for _ in range(n_layers)],
                     dict.fromkeys(STAT_KEYS, 0), [], [])
    for batch in batches:
        r = jax.device_get(fwd(params, batch))
        out.loss_sum += float(r["loss_sum"])
        out.correct += float(r["correct"])
        out.tokens += float(r["tokens"])
        real = np.asarray(batch["mask"]) > 0
        out.tokens_seen.append((np.asarray(batch["inputs"]), real))
        for layer, (routing, stats) in enumerate(zip(r["routing"], r["stats"])):
            out.ids[layer].append(np.asarray(routing["ids"])[real])
            out.probs[layer].append(np.asarray(routing["probs"])[real])
            for k in STAT_KEYS:
                out.stats[k] += int(stats.get(k, 0))
        if keep_inputs:
            out.inputs.append([tuple(np.asarray(r["routing"][i][k]).reshape(-1, *np.shape(r["routing"][i][k])[2:])
                                     for k in ("x", "ids", "weights", "saliency")) for i in range(n_layers)])
    out.ids = [np.concatenate(a) for a in out.ids]
    out.probs = [np.concatenate(a) for a in out.probs]
    return out


def record_trace(model, params, batches, layers, meta: dict):
    """A :class:`~edge_jax.data.routing_trace.RoutingTrace` of ``model`` (run dropless) over ``batches``: every
    real token of every window, its top-k experts and router probabilities at each MoE layer, and the
    model's token-embedding table."""
    from edge_jax.data.routing_trace import RoutingTrace
    r = routing_pass(model, params, batches)
    tokens = np.concatenate([inputs[real] for inputs, real in r.tokens_seen]).astype(np.int32)
    lengths = np.array([row.sum() for _, real in r.tokens_seen for row in real], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[lengths > 0]
    emb = params["embed"]["embedding"]
    trace = RoutingTrace(tokens=tokens, seq_starts=starts.astype(np.int64),
                         experts=np.stack(r.ids, axis=1).astype(np.int16),
                         probs=np.stack(r.probs, axis=1).astype(np.float32), layers=tuple(layers),
                         n_experts=model.cfg.moe_experts, top_k=model.cfg.moe_top_k,
                         embeddings=np.asarray(getattr(emb, "value", emb), np.float32), meta=meta)
    return trace.validate()
