"""Ablation grids: an ablation file -> cell x seed runs -> JSON records -> tables, plots.

    spec      load and validate `ablations/<name>.py` (get_grid(preset) -> dict)
    runner    run cells in OUT/runs/<cell>/seed<s>, write OUT/records/<cell>__seed<s>.json
    locks     one process per unit (OUT/runs/<cell>/seed<s>.lock) and per stage run
    records   read OUT/records: each (grid, preset, cell, seed) once, unreadable files named
    reuse     a sibling grid's record with the same config stands in for a run
    stages    shared prerequisite runs (a base LM every cell fine-tunes)
    tables    OUT/table.md and OUT/table.csv from the records (paper numbers beside ours)
    plots     OUT/curves.png from the records
    post      the grid's post hook; one whose inputs are not here keeps its outputs
    command   the `edge-jax grid` subcommand (add_arguments / run)
"""
from edge_jax.grid.runner import RunSummary, Unit, load_records, plan, run_grid
from edge_jax.grid.spec import Grid, GridSpecError, PaperRef, load_grid, validate_grid
from edge_jax.grid.tables import build_table, write_tables

__all__ = [
    "Grid", "GridSpecError", "PaperRef", "load_grid", "validate_grid",
    "Unit", "RunSummary", "plan", "run_grid", "load_records",
    "build_table", "write_tables",
]
