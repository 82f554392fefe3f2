"""LogitLens (MeKi §5.5, Fig. 7): each layer's residual stream through the final norm + LM head.

For layer ``l`` the early-exit distribution is ``softmax(head(final_norm(hidden[l])))``; we report
``KL(p_early_l || p_final)`` against the model's own output, averaged over (mask-weighted) tokens, and
beside it the other direction, ``KL(p_final || p_early_l)``, since the paper does not say which it
used. The last layer's early exit is the model output, so its KL is 0. ``hidden[l]`` is the residual
stream after the whole block ``l``, memory branches included (a MeKi layer's retrieval is added at its
FFN site inside the block), so the early exit sees what MeKi contributes up to that layer.

    edge-jax analyze logit-lens --workdir W_base --workdir W_meki --label base --label meki --out DIR
"""
from __future__ import annotations

import csv
import io
import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.layers.norms import rms_normalize
from edge_jax.models.head import vocab_logits
from edge_jax.utils.atomic import save_figure_atomic, write_text_atomic
from edge_jax.utils.workdirs import workdir_labels


def early_exit_logits(cfg, params, h_BTD, w_DV):
    """The model's final norm and LM head ``w_DV`` (as the model hands it out with
    ``features_only``) applied to a hidden state (float32 logits [B, T, V])."""
    x_BTD = (rms_normalize(h_BTD, cfg.norm_eps) * params["final_norm"]["scale"].astype(jnp.float32)).astype(h_BTD.dtype)
    return vocab_logits(x_BTD.astype(w_DV.dtype), w_DV)


def make_layer_kl_fn(model):
    """jitted ``fn(params, tokens_BT, mask_BT, extra) -> (kl_sum [L], reverse_kl_sum [L], count)``;
    mask-weighted sums of KL(early || final) and KL(final || early). ``extra``: keyword arguments for
    ``model.apply`` (the host inputs, :func:`edge_jax.models.inputs.model_kwargs`)."""

    def fn(params, tokens_BT, mask_BT, extra):
        params = nn.unbox(params)
        (h_final, w_DV), hidden = model.apply({"params": params}, tokens_BT, return_hidden=True,
                                              features_only=True, **extra)
        logp_final_BTV = jax.nn.log_softmax(vocab_logits(h_final, w_DV), axis=-1)
        sums, reverse = [], []
        for h_BTD in hidden:
            logp_BTV = jax.nn.log_softmax(early_exit_logits(model.cfg, params, h_BTD, w_DV), axis=-1)
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


def _rows(labels: list[str], results: list[dict], key: str = "kl") -> list[list]:
    n = max(len(r[key]) for r in results)
    rows = [[i] + [r[key][i] if i < len(r[key]) else None for r in results] for i in range(n)]
    return rows + [["mean"] + [float(np.mean(r[key])) for r in results]]


def _fmt(v) -> str:
    return "" if v is None else f"{v:.4g}"


def write_markdown(labels, results, path) -> None:
    lines = ["# LogitLens: KL between each layer's early exit and the final output", "",
             "Each layer's output through the final norm + LM head (MeKi §5.5, Fig. 7); nats, mean over "
             "validation tokens, in both directions (the paper does not say which). Layer i is the residual "
             "stream after `layers_i`, memory branches included; the last layer is the model output (KL 0); "
             "`mean` is over layers.", ""]
    lines += [f"- **{lab}**: `{r['workdir']}`, step {r['step']}, {r['tokens']} tokens" for lab, r in zip(labels, results)]
    for key, title in (("kl", "KL(early exit || final output)"), ("kl_reverse", "KL(final output || early exit)")):
        lines += ["", f"{title}:", "", "| layer | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
        lines += ["| " + " | ".join([str(row[0])] + [_fmt(v) for v in row[1:]]) + " |"
                  for row in _rows(labels, results, key)]
    write_text_atomic(path, "\n".join(lines) + "\n")


def write_csv(labels, results, path) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["layer"] + labels + [f"{lab} (reverse)" for lab in labels])
    for row, rev in zip(_rows(labels, results), _rows(labels, results, "kl_reverse")):
        w.writerow([row[0]] + ["" if v is None else repr(float(v)) for v in row[1:] + rev[1:]])
    write_text_atomic(path, buf.getvalue())


def write_plot(labels, results, path) -> None:
    """KL vs layer on a log axis; points at or below 1e-9 (the last layer's exact 0) are not drawn."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.ticker import MaxNLocator
    fig = Figure(figsize=(7, 4.5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    for lab, r in zip(labels, results):
        kl = np.asarray(r["kl"], np.float64)
        ax.plot(np.arange(len(kl)), np.where(kl > 1e-9, kl, np.nan), marker="o", markersize=3, label=lab)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer")
    ax.set_ylabel("KL(early exit || final), nats")
    ax.set_title("LogitLens: layer-wise KL divergence (last layer = final output, KL 0, not drawn)",
                 fontsize="medium")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    save_figure_atomic(fig, path)


def run_logit_lens(workdirs: list[str], out: str, labels: list[str] | None = None,
                   num_tokens: int = 10_000) -> dict:
    """Analyse every workdir and write ``out/logit_lens.{md,csv,png}``; returns labels, results, paths."""
    if not workdirs or num_tokens <= 0:
        raise ValueError(f"logit-lens needs at least one workdir and num_tokens > 0, got {num_tokens}")
    if labels and len(labels) != len(workdirs):
        raise ValueError(f"{len(labels)} --label for {len(workdirs)} --workdir; give one label per workdir or none")
    labels = list(labels) if labels else workdir_labels(workdirs)
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {labels}")
    results = [logit_lens_workdir(w, num_tokens) for w in workdirs]
    paths = {k: os.path.join(out, f"logit_lens.{k}") for k in ("md", "csv", "png")}
    if jax.process_index() == 0:  # every process computes the same numbers; one writes them
        write_markdown(labels, results, paths["md"])
        write_csv(labels, results, paths["csv"])
        write_plot(labels, results, paths["png"])
    return {"labels": labels, "results": results, "paths": paths}
