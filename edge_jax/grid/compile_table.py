"""``edge-jax grid ABLATION --preset paper --compile-only --topology T``: compile every training run
of a grid (its stages and its cells that train; seed 0, since seeds change no shape) for a TPU
topology and write ``results/<name>/<preset>_compile.md`` (for a GPU card, ``gpu_compile.md``, one
section per card and preset): per run the mesh, HBM per device,
whether it fits (else the cheapest fix the compiler confirms), the roofline step time, its
model-FLOPs utilisation, tokens/s and the time for the run's token budget (train.steps x batch x
seq). Layers are compiled scanned unless ``unrolled`` or the run sets ``model.scan_layers`` itself
(:func:`edge_jax.compile.command.choose_layers`); a run compiled unrolled says so in its name.

Rows are kept per topology in ``<preset>_compile.json`` beside the table, so compiling a second
topology adds its rows; both files are written atomically after every run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from edge_jax.errors import UserError
from edge_jax.grid.spec import Grid
from edge_jax.grid.stages import references
from edge_jax.utils.atomic import write_json_atomic, write_text_atomic
from edge_jax.utils.provenance import git_info

COLUMNS = ("run", "mesh", "HBM / device", "fits", "est. step", "est. MFU", "est. tokens/s", "est. time for budget",
           "compile s")


def runs(grid: Grid) -> dict[str, tuple[str, dict]]:
    """``name -> (base, overrides)`` of every run of ``grid``: stages first, then cells. A stage
    reference (``{stage:x}``, the weights a run starts from) becomes the placeholder ``<stage x>``:
    shapes do not depend on it, and nothing is read from it."""
    out = {}
    for name, stage in grid.stages.items():
        out[f"stage {name}"] = (stage["base"], {**stage.get("overrides", {}), "seed": 0})
    for cell in grid.cells:
        out[cell] = (grid.base, grid.overrides(cell, 0))
    return {name: (base, {k: _placeholder(v) for k, v in o.items()}) for name, (base, o) in out.items()}


def _placeholder(value):
    refs = references({"": value})
    return "<stage " + " ".join(refs) + ">" if refs else value


def _row(name: str, config, target, outcome) -> dict:
    from edge_jax.compile.report import duration, estimate, gib, mesh_text
    stats = outcome.fix_stats or outcome.stats  # the step as it fits, where a fix was found
    row = {"run": name, "mesh": mesh_text(dict(stats.mesh)) if stats else "", "fix": outcome.fix or ""}
    if outcome.stats is None:
        short = outcome.oom.short_by
        row["fits"] = f"no: {gib(short)} over" if short else "no"
    elif outcome.fits:
        row["fits"] = "yes"
    else:
        row["fits"] = f"no: {gib(outcome.stats.total_bytes - target.chip.hbm_bytes)} over"
    if not outcome.fits:
        row["fits"] += f"; fits with {outcome.fix}" if outcome.fix else "; no candidate fix fits"
        fixed = outcome.stats.total_bytes - outcome.stats.temp_bytes if outcome.stats else 0
        if not outcome.fix and target.chip is not None and fixed > target.chip.hbm_bytes:
            row["fits"] += f" (what no micro-batch changes, the state and program, is {gib(fixed)})"
    if stats is not None:
        est = estimate(stats, target)
        budget = float(config.train.steps) * stats.tokens
        row.update({"HBM / device": gib(stats.total_bytes), "compile s": f"{stats.compile_s:.0f}",
                    "est. step": _ms(est.step_s) if est else "",
                    "est. MFU": ("n/a" if est.mfu is None else f"{100 * est.mfu:.1f} %") if est else "",
                    "est. tokens/s": f"{est.tokens_per_s:,.0f}" if est else "",
                    "est. time for budget": f"{duration(budget / est.tokens_per_s)} ({budget:.3g} tokens)"
                    if est and budget else ""})
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.3g} ms"


def render(grid: Grid, preset: str, rows: dict, gpu: bool = False) -> str:
    from edge_jax.compile.report import GPU_NOTE, NOTE
    title = "compiled for one GPU (one section per card and preset)" if gpu else f"compiled for TPU ({preset} preset)"
    lines = [f"# {grid.title}: {title}", "",
             f"Written by `edge-jax grid {grid.path} --preset {'P' if gpu else preset} --compile-only --topology T` "
             "(docs/compile.md). One row per training run at seed 0; HBM is the compiler's per-device total "
             "(arguments + outputs - donated + temporaries + program). Where a run does not fit, the HBM and "
             "estimates are those with the fix named. Layers are scanned (`model.scan_layers=True`) unless the "
             "run's name says unrolled.", "", NOTE, *([GPU_NOTE] if gpu else []), ""]
    for topology, entry in rows.items():
        extra = ", ".join(f"`{k}={v}`" for k, v in entry.get("overrides", {}).items())
        lines += [f"## {topology}", "", f"Compiled at commit {entry['commit']} with jax {entry['jax']}"
                  + (f"; every run with {extra}." if extra else "."), "",
                  "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in entry["rows"].values()]
        lines.append("")
    return "\n".join(lines)


def compile_grid(grid: Grid, target, mesh: dict, out_dir: Path, load_config: Callable, extra: dict,
                 log=print, unrolled: bool = False) -> Path:
    """Compile every run of ``grid`` for ``target`` and (re)write its compile table; the layers
    scanned unless ``unrolled`` (or a run sets ``model.scan_layers``, or cannot scan)."""
    import jax

    from edge_jax.compile.command import SCAN_KEY, choose_layers, compiler
    from edge_jax.compile.fit import compile_with_fix
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = target.platform == "gpu"   # one file for every preset on a card
    data_path = out_dir / ("gpu_compile.json" if gpu else f"{grid.preset}_compile.json")
    table_path = data_path.with_suffix(".md")
    rows = json.loads(data_path.read_text()) if data_path.exists() else {}
    info = git_info(Path(grid.path).resolve().parent)
    commit = (info["commit"] or "unknown")[:7] + ("-dirty" if info["dirty"] else "")
    entry = {"commit": commit, "jax": jax.__version__, "overrides": dict(extra), "rows": {}}
    rows[f"{target.name}, {grid.preset} preset" if gpu else target.name] = entry
    for name, (base, overrides) in runs(grid).items():
        if {**overrides, **extra}.get("train.steps") == 0:
            log(f"{name}: evaluates only (train.steps=0), nothing to compile")
            continue
        try:
            config = load_config(base, {**overrides, **extra})
            config.mesh.update(mesh)
            layers = choose_layers(config, unrolled, SCAN_KEY in {**overrides, **extra})
            if not config.model.scan_layers:
                log(f"{name}: layers {layers}")
            shown = name if config.model.scan_layers else f"{name} (unrolled)"
            entry["rows"][name] = _row(shown, config, target, compile_with_fix(config, target, compiler(target)))
        except (UserError, ValueError, jax.errors.JaxRuntimeError) as e:  # a run the target cannot build (or
            # its compiler refuses in a way that is not a size): said in its row, and the grid goes on
            entry["rows"][name] = {"run": name, "fits": f"not compiled: {str(e).splitlines()[0][:160]}"}
        log(f"{name}: " + ", ".join(f"{k} {v}" for k, v in entry["rows"][name].items() if k != "run" and v))
        write_json_atomic(data_path, rows)
        write_text_atomic(table_path, render(grid, grid.preset, rows, gpu))
    return table_path
