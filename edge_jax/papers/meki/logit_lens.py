"""LogitLens (MeKi §5.5, Fig. 7): each layer's residual stream through the final norm + LM head.

For layer ``l`` the early-exit distribution is ``softmax(head(final_norm(hidden[l])))``; we report
``KL(p_early_l || p_final)`` against the model's own output, averaged over (mask-weighted) tokens, and
beside it the other direction, ``KL(p_final || p_early_l)``, since the paper does not say which it
used. The last layer's early exit is the model output, so its KL is 0. ``hidden[l]`` is the residual
stream after the whole block ``l``, memory branches included (a MeKi layer's retrieval is added at its
FFN site inside the block), so the early exit sees what MeKi contributes up to that layer.

    edge-jax analyze logit-lens --workdir W_base --workdir W_meki --label base --label meki --out DIR
    edge-jax analyze logit-lens --runs results/meki_main --seeds 3 --compare meki:baseline --out DIR

Over seeds (runs grouped by cell and seed, mean ± std per layer, a paired t-test per layer for each
``--compare better:worse``): :mod:`edge_jax.papers.meki.logit_lens_seeds`.
"""
from __future__ import annotations

import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.norms import make_norm
from edge_jax.models.head import split_features, vocab_logits
from edge_jax.papers.meki.logit_lens_seeds import (
    DIRECTIONS,
    Run,
    by_cell,
    check_compare,
    compare_all,
    layer_stats,
    write_tables,
)
from edge_jax.utils.atomic import save_figure_atomic


def early_exit_logits(cfg, params, h_BTD, w_DV, b_V=None):
    """The model's final norm (kind ``model.norm``) and LM head ``w_DV``, ``b_V`` (as the model hands
    them out with ``features_only``) applied to a hidden state (float32 logits [B, T, V])."""
    norm = make_norm(cfg.norm, cfg.norm_eps, "norm", cfg.param_dtype)
    x_BTD = norm.apply({"params": params["final_norm"]}, h_BTD)
    return vocab_logits(x_BTD.astype(w_DV.dtype), w_DV, b_V)


def make_layer_kl_fn(model):
    """jitted ``fn(params, tokens_BT, mask_BT, extra) -> (kl_sum [L], reverse_kl_sum [L], count)``;
    mask-weighted sums of KL(early || final) and KL(final || early). ``extra``: keyword arguments for
    ``model.apply`` (the host inputs, :func:`edge_jax.models.inputs.model_kwargs`)."""

    def fn(params, tokens_BT, mask_BT, extra):
        params = nn.unbox(params)
        features, hidden = model.apply({"params": params}, tokens_BT, return_hidden=True, features_only=True,
                                       **extra)
        h_final, w_DV, b_V = split_features(features)
        logp_final_BTV = jax.nn.log_softmax(vocab_logits(h_final, w_DV, b_V), axis=-1)
        sums, reverse = [], []
        for h_BTD in hidden:
            logp_BTV = jax.nn.log_softmax(early_exit_logits(model.cfg, params, h_BTD, w_DV, b_V), axis=-1)
            kl_BT = jnp.sum(jnp.exp(logp_BTV) * (logp_BTV - logp_final_BTV), axis=-1)
            rkl_BT = jnp.sum(jnp.exp(logp_final_BTV) * (logp_final_BTV - logp_BTV), axis=-1)
            sums.append(jnp.sum(kl_BT * mask_BT))
            reverse.append(jnp.sum(rkl_BT * mask_BT))
        return jnp.stack(sums), jnp.stack(reverse), jnp.sum(mask_BT)

    return jax.jit(fn)


def layer_kl(model, params, tokens_BT, extra: dict | None = None, mask_BT=None,
             reverse: bool = False) -> np.ndarray:
    """Mean over tokens of KL(softmax(early_l) || softmax(final)) for every layer (``reverse``:
    KL(final || early_l)): float32 [n_layers]."""
    tokens_BT = jnp.asarray(tokens_BT)
    mask_BT = jnp.ones(tokens_BT.shape, jnp.float32) if mask_BT is None else jnp.asarray(mask_BT, jnp.float32)
    sums, reverse_sums, count = make_layer_kl_fn(model)(params, tokens_BT, mask_BT, dict(extra or {}))
    chosen = reverse_sums if reverse else sums
    return (np.asarray(chosen, np.float64) / max(float(count), 1.0)).astype(np.float32)


def _keep_first(mask_BT: np.ndarray, n: float) -> np.ndarray:
    """The mask with only its first ``n`` counted tokens (row-major) left on."""
    mask_BT = np.asarray(mask_BT, np.float32)
    before = np.cumsum(mask_BT.ravel()).reshape(mask_BT.shape) - mask_BT
    return np.where(before < n, mask_BT, 0.0).astype(np.float32)


def logit_lens_workdir(workdir: str, num_tokens: int = 10_000) -> dict:
    """Per-layer KL over the first ``num_tokens`` validation tokens of the latest checkpoint."""
    from edge_jax.data import make_eval_batches
    from edge_jax.models.inputs import host_inputs, model_kwargs
    from edge_jax.sharding import batch_sharding, process_rows, to_global
    from edge_jax.train.evaluate import restore_latest

    run, state, step = restore_latest(workdir)
    data = run.config.data
    n_batches = math.ceil(num_tokens / (data.batch_size * data.seq_len)) + 1
    fn, sharding = make_layer_kl_fn(run.model), batch_sharding(run.mesh)
    sums, reverse, count = np.zeros(run.model.cfg.n_layers, np.float64), np.zeros(run.model.cfg.n_layers), 0.0
    for batch in make_eval_batches(data, run.tokenizer, "validation", n_batches):
        if count >= num_tokens:
            break
        rows = {"inputs": batch["inputs"], "mask": _keep_first(batch["mask"], num_tokens - count),
                **host_inputs(run.model.cfg, batch["inputs"])}
        g = to_global(process_rows(rows, sharding), sharding)
        s, r, c = fn(state.params, g["inputs"], g["mask"], model_kwargs(g))
        sums, reverse, count = sums + np.asarray(s, np.float64), reverse + np.asarray(r, np.float64), count + float(c)
    return {"workdir": workdir, "step": int(step), "tokens": int(count),
            "kl": (sums / max(count, 1.0)).tolist(), "kl_reverse": (reverse / max(count, 1.0)).tolist()}


def write_plot(runs, results, path) -> None:
    """KL vs layer on a log axis, both directions, per cell the mean over seeds with ± std bars; points
    at or below 1e-9 (the last layer's exact 0) are not drawn."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.ticker import MaxNLocator
    cells = by_cell(runs, results)
    fig = Figure(figsize=(11, 4.5), dpi=120, layout="constrained")
    axes = fig.subplots(1, len(DIRECTIONS), sharey=True)
    for ax, (key, title, _) in zip(axes, DIRECTIONS):
        for cell, seeds in cells.items():
            stats = layer_stats(seeds, key)[:-1]
            mean = np.array([s.mean for s in stats], np.float64)
            std = np.array([s.std or 0.0 for s in stats], np.float64)
            shown = mean > 1e-9
            ax.errorbar(np.arange(len(mean))[shown], mean[shown], yerr=std[shown], marker="o", markersize=3,
                        capsize=3, label=f"{cell} ({len(seeds)} seed{'s' * (len(seeds) != 1)})")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer")
        ax.set_title(title + ", nats", fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("KL, mean ± std over seeds")
    axes[0].legend(fontsize="small")
    fig.suptitle("LogitLens: layer-wise KL (last layer = final output, KL 0, not drawn)", fontsize="medium")
    save_figure_atomic(fig, path)


def run_logit_lens(runs: list[Run], out: str, compare: list[tuple[str, str]] = (),
                   num_tokens: int = 10_000) -> dict:
    """Analyse every run (:func:`~edge_jax.papers.meki.logit_lens_seeds.group_workdirs` or
    :func:`~edge_jax.papers.meki.logit_lens_seeds.find_runs`) and write ``out/logit_lens.{md,csv,png}``,
    with ``compare`` (``(better, worse)`` cells) also the paired tests and ``logit_lens_pairs.csv``;
    returns the runs, results, comparisons and paths."""
    if not runs or num_tokens <= 0:
        raise ValueError(f"logit-lens needs at least one run and num_tokens > 0, got {num_tokens}")
    check_compare(list(compare), list(dict.fromkeys(r.cell for r in runs)))  # before the long part
    results = [logit_lens_workdir(r.workdir, num_tokens) for r in runs]
    comparisons = compare_all(runs, results, list(compare))
    paths = {}
    if jax.process_index() == 0:  # every process computes the same numbers; one writes them
        paths = write_tables(runs, results, comparisons, out)
        paths["png"] = os.path.join(out, "logit_lens.png")
        write_plot(runs, results, paths["png"])
    return {"runs": runs, "results": results, "comparisons": comparisons, "paths": paths}
