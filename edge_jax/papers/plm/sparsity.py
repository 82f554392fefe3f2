"""Activation sparsity (PLM §7.2, Algorithm 1, Fig. 11, Table 14).

Every FFN's activation ``a`` (the input of its down projection; ``act(gate) * up`` when gated) is
masked at ratio r: the elements with ``|a| <= T_r``, T_r the r-quantile of ``|a|`` over all of the
layer's elements in the batch, are zeroed (:func:`edge_jax.layers.ffn.mask_smallest`), in every
FFN layer at once. Perplexity is measured on validation batches for r from 0 to 1 (Fig. 11).

Algorithm 1's activation sparsity rate is the largest r whose perplexity increase over the
unmasked model stays within a limit. The paper's limit is absolute, Δppl <= 1 (``max_ppl_increase``),
which is scale-dependent: a tiny model at perplexity 6 tolerates a 17% rise, a paper-scale one at
perplexity 10 only 10%. So the headline ``sparsity_rate`` uses the relative limit Δppl <= 1% of the
unmasked perplexity (``max_rel_increase``), and ``sparsity_rate_abs`` the paper's absolute one beside
it. For each, the sweep's grid finds the last passing point; bisection between it and the next grid
point refines the rate to ``resolution`` (the curve is monotone in practice; the refinement assumes so
locally).

Table 14's counts: a masked activation skips the weights that consume it, the ``down`` column
(and, gated, the ``up`` row computed beside the gate), so ``masked = rate x (1 or 2) x L x D x F``
and ``executed = total - masked``; ``executed_fraction`` is the paper's last column.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.ffn import FFN_KINDS
from edge_jax.models.inputs import model_kwargs
from edge_jax.train.step import token_losses

DEFAULT_POINTS = 21  # r = 0, 0.05, ..., 1


def check_ratios(ratios) -> list[float]:
    ratios = [float(r) for r in ratios]
    bad = [r for r in ratios if not 0.0 <= r <= 1.0 or math.isnan(r)]
    if not ratios or bad:
        raise ValueError(f"sparsity ratios must lie in [0, 1], got {bad or 'none'}; e.g. --ratios 0,0.5,0.9,1")
    return sorted(set(ratios))


def make_masked_eval(model):
    """jitted ``fn(params, batch, ratio) -> (loss_sum, tokens, zero_fraction [L])``."""

    def fn(params, batch, ratio):
        logits, state = model.apply({"params": nn.unbox(params)}, batch["inputs"], ffn_mask_ratio=ratio,
                                    mutable=["intermediates"], **model_kwargs(batch))
        nll = token_losses(logits, batch["targets"])
        mask = batch.get("mask", jnp.ones(nll.shape, jnp.float32))
        zeros = [v["ffn"]["zero_fraction"][0] for k, v in sorted(state["intermediates"].items(),
                                                                  key=lambda kv: int(kv[0].rsplit("_", 1)[-1]))
                 if k.startswith("layers_")]
        return jnp.sum(nll * mask), jnp.sum(mask), jnp.stack(zeros)

    return jax.jit(fn)


def masked_perplexity(fn, params, batches, ratio: float) -> tuple[float, np.ndarray]:
    """(perplexity, per-layer zero fraction averaged over batches) with every FFN masked at ``ratio``."""
    loss, tokens, zeros = 0.0, 0.0, []
    for batch in batches:
        s, n, z = fn(params, batch, jnp.float32(ratio))
        loss, tokens = loss + float(s), tokens + float(n)
        zeros.append(np.asarray(z))
    return math.exp(min(loss / max(tokens, 1.0), 50.0)), np.mean(zeros, axis=0)


def sparsity_sweep(model, params, batches, ratios=None, max_ppl_increase: float = 1.0,
                   max_rel_increase: float = 0.01, resolution: float = 1e-3) -> dict:
    """Fig. 11's curve and Algorithm 1's rates for one model on ``batches`` (host dicts): ``sparsity_rate``
    at Δppl <= ``max_rel_increase`` x the unmasked perplexity, ``sparsity_rate_abs`` at Δppl <=
    ``max_ppl_increase``."""
    if max_ppl_increase < 0 or max_rel_increase < 0:
        raise ValueError(f"max_ppl_increase={max_ppl_increase} and max_rel_increase={max_rel_increase} must be >= 0")
    ratios = check_ratios(np.linspace(0.0, 1.0, DEFAULT_POINTS) if ratios is None else ratios)
    fn = make_masked_eval(model)
    base, zero_fraction = masked_perplexity(fn, params, batches, 0.0)
    ppl = [masked_perplexity(fn, params, batches, r)[0] for r in ratios]

    def rate(limit: float) -> float:
        """The largest r with a perplexity increase of at most ``limit``: grid, then bisection."""
        passing = [i for i, p in enumerate(ppl) if p - base <= limit]
        best = ratios[passing[-1]] if passing else 0.0
        if passing and passing[-1] + 1 < len(ratios):
            lo, hi = best, ratios[passing[-1] + 1]
            while hi - lo > resolution:
                mid = 0.5 * (lo + hi)
                ok = masked_perplexity(fn, params, batches, mid)[0] - base <= limit
                lo, hi = (mid, hi) if ok else (lo, mid)
            best = lo
        return float(best)

    return {"base_ppl": base, "ratios": list(ratios), "ppl": ppl, "ppl_increase": [p - base for p in ppl],
            "max_ppl_increase": max_ppl_increase, "max_rel_increase": max_rel_increase,
            "sparsity_rate": rate(max_rel_increase * base), "sparsity_rate_abs": rate(max_ppl_increase),
            "zero_fraction": float(np.mean(zero_fraction)), "zero_fraction_per_layer": zero_fraction.tolist()}


def parameter_usage(cfg, rate: float) -> dict:
    """Table 14: total, masked and executed parameters at activation sparsity ``rate``."""
    from edge_jax.models.count import param_breakdown
    total = param_breakdown(cfg)["total"]
    consumers = 2 if FFN_KINDS.get(cfg.ffn).gated else 1
    masked = rate * consumers * cfg.n_layers * cfg.d_model * cfg.d_ff
    return {"total_params": total, "masked_params": masked, "executed_params": total - masked,
            "executed_fraction": (total - masked) / total}


def sparsity_metrics(model, params, batches, max_ppl_increase: float = 1.0) -> tuple[dict, dict]:
    """(scalar metrics for a run record, the full sweep) on host ``batches``."""
    sweep = sparsity_sweep(model, params, batches, max_ppl_increase=max_ppl_increase)
    usage = parameter_usage(model.cfg, sweep["sparsity_rate"])
    scalars = {"sparsity_rate": sweep["sparsity_rate"], "sparsity_rate_abs": sweep["sparsity_rate_abs"],
               "zero_fraction": sweep["zero_fraction"], "executed_fraction": usage["executed_fraction"]}
    return scalars, {**sweep, **usage}
