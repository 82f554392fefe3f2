"""curves.png: validation loss vs step, one line per cell (mean over seeds),
the band between the seeds' min and max shaded. Built only from records."""
from __future__ import annotations

from pathlib import Path

from edge_jax.grid.spec import Grid
from edge_jax.utils import storage
from edge_jax.utils.atomic import save_figure_atomic


def seed_band(curves: list[list[list[float]]]) -> tuple[list[int], list[float], list[float],
                                                         list[float]]:
    """steps, mean, min, max over seeds at every step any seed evaluated.

    Seeds may have evaluated at different steps (say one was resumed); each step
    uses the seeds that have it.
    """
    at: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            at.setdefault(int(step), []).append(float(value))
    steps = sorted(at)
    return (steps, [sum(at[s]) / len(at[s]) for s in steps],
            [min(at[s]) for s in steps], [max(at[s]) for s in steps])


def write_curves(grid: Grid, records: list[dict], out: str | Path) -> Path:
    """Draw OUT/curves.png from the records' `curve` fields; returns the path."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    mine = [r for r in records if r.get("grid") == grid.name
            and r.get("preset") == grid.preset and r.get("cell") in grid.cells]
    fig = Figure(figsize=(7, 4.5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    drawn = 0
    for cell in grid.cells:
        curves = [r.get("curve") or [] for r in mine if r["cell"] == cell]
        steps, mean, lo, hi = seed_band(curves)
        if not steps:
            continue
        n = sum(1 for c in curves if c)
        (line,) = ax.plot(steps, mean, marker="o" if len(steps) < 30 else None,
                          markersize=3, label=f"{cell} (n={n})")
        if n > 1:
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += 1
    if not drawn:
        ax.text(0.5, 0.5, "no validation points recorded yet", ha="center", va="center",
                transform=ax.transAxes)
    else:
        ax.legend(fontsize="small")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss")
    ax.set_title(f"{grid.title}\n{grid.name}, preset {grid.preset}: mean over seeds, "
                 "min-max shaded", fontsize="medium")
    ax.grid(True, alpha=0.3)
    path = storage.path(out) / "curves.png"
    save_figure_atomic(fig, path)
    return path
