"""Log-linear fit of a grid's metric against memory size (MeKi §5.4, Fig. 6).

Memory size is the ROM a MeKi model stores, ``n_layers * vocab_size * d_mem``, read from each
record's config. The fit is ordinary least squares of the metric on ln(memory size) over every
cell x seed record: ``metric = a + b * ln(size)``; the paper's claim is a straight line with b < 0.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edge_jax.utils.atomic import save_figure_atomic, write_text_atomic


def memory_size(record: dict) -> int:
    """``L * |V| * d_mem`` of a grid record (its vocabulary size as
    :func:`edge_jax.grid.runner.resolved_vocab_size` resolves it)."""
    from edge_jax.grid.runner import resolved_vocab_size
    m = record["config"]["model"]
    return int(m["n_layers"]) * resolved_vocab_size(record) * int(m["d_mem"])


def log_linear_fit(sizes, values) -> dict:
    """``{"a", "b", "r2", "n"}`` for ``values ≈ a + b * ln(sizes)``; needs two distinct sizes."""
    x, y = np.log(np.asarray(sizes, np.float64)), np.asarray(values, np.float64)
    if len(set(x.tolist())) < 2:
        raise ValueError("a log-linear fit needs records at two or more memory sizes")
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / total if total > 0 else float("nan")
    return {"a": float(a), "b": float(b), "r2": r2, "n": int(len(x))}


def write_memory_fit(grid, records: list[dict], out) -> list[Path]:
    """fit.md and scaling.png in ``out`` from the grid's records (the grid ``post`` hook)."""
    out = Path(out)
    points = [(memory_size(r), float(r["metrics"][grid.metric]), r["cell"])
              for r in records
              if math.isfinite(float(r["metrics"].get(grid.metric, float("nan"))))]
    fit = log_linear_fit([p[0] for p in points], [p[1] for p in points])
    cells = {}
    for size, value, cell in points:
        cells.setdefault((size, cell), []).append(value)
    lines = [f"# {grid.title}: log-linear fit", "",
             f"{grid.metric} = {fit['a']:.4f} {'+' if fit['b'] >= 0 else '-'} {abs(fit['b']):.4f} · ln(memory size)"
             f"   (R² = {fit['r2']:.3f}, {fit['n']} runs)", "",
             f"| cell | memory size (L × V × d_mem) | mean {grid.metric} | fit | seeds |", "|---|---|---|---|---|"]
    for (size, cell), values in sorted(cells.items()):
        lines.append(f"| {cell} | {size:,} | {np.mean(values):.4f} | {fit['a'] + fit['b'] * math.log(size):.4f} "
                     f"| {len(values)} |")
    lines += ["", "Slope b < 0 means a larger memory gives a lower loss, as MeKi Fig. 6 reports."
              if fit["b"] < 0 else "Slope b >= 0: no gain from a larger memory here, unlike MeKi Fig. 6."]
    write_text_atomic(out / "fit.md", "\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.scatter([p[0] for p in points], [p[1] for p in points], label="runs")
    xs = np.geomspace(min(p[0] for p in points), max(p[0] for p in points), 50)
    ax.plot(xs, fit["a"] + fit["b"] * np.log(xs), "--", label=f"fit, R²={fit['r2']:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel("memory size (weights)")
    ax.set_ylabel(grid.metric)
    ax.set_title(grid.title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    save_figure_atomic(fig, out / "scaling.png")
    plt.close(fig)
    return [out / "fit.md", out / "scaling.png"]
