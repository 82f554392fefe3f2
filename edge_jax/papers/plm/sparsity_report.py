"""Fig. 11 curves and Table 14 rows for trained models: ``edge-jax analyze sparsity`` and the
``plm_activation`` grid's post hook.

    edge-jax analyze sparsity --workdir W [--workdir W2 ...] --out DIR [--max-ppl-increase 1]

Writes ``DIR/sparsity.md`` (rate, exact zeros, Table 14's parameter columns, the curve), ``.csv``
(the curves) and ``.png`` (perplexity increase against the masked fraction).
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np

from edge_jax.grid.post import PostCannotRun, absent_inputs
from edge_jax.papers.plm.sparsity import parameter_usage, sparsity_sweep
from edge_jax.utils.atomic import save_figure_atomic, write_text_atomic
from edge_jax.utils.workdirs import workdir_labels

# PLM Table 14 (raw size B, activation sparsity rate, masked B, executed B, executed fraction).
PAPER_TABLE14 = {
    "PLM-1.8B-Base (ReLU²)": (1.83, 0.9090, 0.4832, 1.3968, 0.7430),
    "Qwen2.5-1.5B (SwiGLU)": (1.54, 0.0400, 0.0308, 1.5092, 0.9800),
    "Yulan-Mini-2.4B (SwiGLU)": (2.42, 0.0900, 0.0929, 2.3271, 0.9616),
    "SmolLM2-1.7B (SwiGLU)": (1.71, 0.0010, 0.0008, 1.7092, 0.9995),
}


def sweep_workdir(workdir: str, num_batches: int = 4, ratios=None, max_ppl_increase: float = 1.0,
                  max_rel_increase: float = 0.01) -> dict:
    """Algorithm 1 and Table 14's counts for the latest checkpoint of ``workdir``."""
    from edge_jax.train.evaluate import restore_latest
    from edge_jax.train.loop import model_eval_batches
    if num_batches <= 0:
        raise ValueError(f"--batches={num_batches} must be positive")
    run, state, step = restore_latest(workdir)
    batches = model_eval_batches(run, "validation", num_batches)
    sweep = sparsity_sweep(run.model, state.params, batches, ratios, max_ppl_increase, max_rel_increase)
    return {**sweep, **parameter_usage(run.model.cfg, sweep["sparsity_rate"]), "workdir": workdir,
            "step": int(step), "ffn": run.model.cfg.ffn}


def _mean(results: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in results]))


def write_report(groups: dict[str, list[dict]], out, title: str) -> list[Path]:
    """``groups``: label -> sweeps (one per seed; averaged). Writes sparsity.{md,csv,png} in ``out``."""
    out = Path(out)
    paths = [out / f"sparsity.{k}" for k in ("md", "csv", "png")]
    first = next(iter(groups.values()))[0]
    lines = [f"# {title}", "",
             f"Every FFN's activations masked at ratio r (smallest |a| per layer zeroed), perplexity on validation "
             f"batches; the activation sparsity rate is the largest r whose perplexity increase stays within a "
             f"limit (PLM Algorithm 1): `sparsity rate` at Δppl <= {100 * first['max_rel_increase']:g}% of the "
             f"unmasked perplexity (scale-free, the headline), `rate @Δppl<={first['max_ppl_increase']:g}` at the "
             f"paper's absolute limit. Params and executed fraction at the headline rate. "
             f"Means over {{n}} seed(s) per row.", "",
             f"| model | n | base ppl | sparsity rate | rate @Δppl<={first['max_ppl_increase']:g} | exact zeros "
             "| params | masked | executed | executed fraction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, rs in groups.items():
        lines.append(f"| {label} | {len(rs)} | {_mean(rs, 'base_ppl'):.3f} | {_mean(rs, 'sparsity_rate'):.4f} "
                     f"| {_mean(rs, 'sparsity_rate_abs'):.4f} "
                     f"| {_mean(rs, 'zero_fraction'):.4f} | {int(rs[0]['total_params']):,} "
                     f"| {_mean(rs, 'masked_params'):,.0f} | {_mean(rs, 'executed_params'):,.0f} "
                     f"| {_mean(rs, 'executed_fraction'):.4f} |")
    lines[2] = lines[2].replace("{n}", "/".join(sorted({str(len(rs)) for rs in groups.values()})))
    lines += ["", "PLM Table 14, for comparison (B = billions of parameters):", "",
              "| model | raw size | sparsity rate | masked | executed | executed fraction |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {v[0]} | {v[1]:.4f} | {v[2]} | {v[3]} | {v[4]:.4f} |" for name, v in PAPER_TABLE14.items()]
    lines += ["", "Perplexity increase at each masked fraction r (Fig. 11):", "",
              "| r | " + " | ".join(groups) + " |", "|---:|" + "---:|" * len(groups)]
    ratios = first["ratios"]
    for i, r in enumerate(ratios):
        lines.append(f"| {r:.2f} | " + " | ".join(f"{np.mean([x['ppl_increase'][i] for x in rs]):.4g}"
                                                   for rs in groups.values()) + " |")
    write_text_atomic(paths[0], "\n".join(lines) + "\n")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["r"] + list(groups))
    for i, r in enumerate(ratios):
        w.writerow([repr(float(r))]
                   + [repr(float(np.mean([x["ppl_increase"][i] for x in rs]))) for rs in groups.values()])
    write_text_atomic(paths[1], buf.getvalue())
    _plot(groups, paths[2], first["max_ppl_increase"])
    return paths


def _plot(groups, path, limit: float) -> None:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(7, 4.5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    for label, rs in groups.items():
        inc = np.mean([r["ppl_increase"] for r in rs], axis=0)
        ax.plot(rs[0]["ratios"], np.maximum(inc, 1e-6), marker="o", markersize=3, label=label)
    ax.axhline(limit, color="gray", linestyle="--", linewidth=1, label=f"Δppl = {limit:g}")
    ax.set_yscale("log")
    ax.set_xlabel("fraction of FFN activations masked (smallest |a|)")
    ax.set_ylabel("perplexity increase (log; floor 1e-6)")
    ax.set_title("Perplexity increase vs masked activations (PLM Fig. 11)", fontsize="medium")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    save_figure_atomic(fig, path)


def run_sparsity(workdirs: list[str], out: str, labels: list[str] | None = None, num_batches: int = 4,
                 ratios=None, max_ppl_increase: float = 1.0, max_rel_increase: float = 0.01) -> dict:
    """``edge-jax analyze sparsity``: sweep every workdir and write the report."""
    labels = list(labels) if labels else workdir_labels(workdirs)
    if len(labels) != len(workdirs) or len(set(labels)) != len(labels):
        raise ValueError(f"need one distinct --label per --workdir, got {labels}")
    results = [sweep_workdir(w, num_batches, ratios, max_ppl_increase, max_rel_increase) for w in workdirs]
    paths = write_report({lab: [r] for lab, r in zip(labels, results)}, out, "Activation sparsity (PLM §7.2)")
    return {"labels": labels, "results": results, "paths": paths}


def write_sparsity_curves(grid, records: list[dict], out) -> list[Path]:
    """Grid post hook: the report from the ``sparsity.json`` each training run wrote (no recompute). A run
    whose sparsity.json is not here leaves the report as it is (or, with none here, unwritten)."""
    missing = absent_inputs(records, "sparsity.json")
    if missing:
        raise PostCannotRun(f"{len(missing)} of the {len(records)} runs' sparsity.json are not here ({missing[0]}"
                            f"{', ...' if len(missing) > 1 else ''}); run the grid (train.sparsity_batches > 0) "
                            "to remeasure", [Path(out) / n for n in ("sparsity.md", "sparsity.csv", "sparsity.png")])
    groups: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (list(grid.cells).index(r["cell"]), r["seed"])):
        path = os.path.join(r.get("workdir") or "", "sparsity.json")
        if os.path.exists(path):
            with open(path) as f:
                groups.setdefault(r["cell"], []).append(json.load(f))
    if not groups:
        raise FileNotFoundError(f"no sparsity.json in the workdirs of {grid.name}; "
                                "train with train.sparsity_batches > 0")
    return write_report(groups, out, grid.title)
