"""EdgeInfinite Table 1: EdgeInfinite vs every registered KV-cache baseline (KV_METHODS).

    edge-jax grid ablations/edgeinfinite_main.py --preset tiny --seeds 3

Cells are evaluation only, one per registered KV method in registration order (a new baseline is a
new cell; :func:`edge_jax.infer.longctx.method_cells`); the base LM and the gate are the grid's stages
(trained once and shared with edgeinfinite_tokens). The table ranks cells by exact match at the paper's
4-16x the base's window (longctx/overall) with the gold answer's NLL beside it, and the same at the near
band, 1-2x (longctx/near/*); categories.md (post hook) has every category of both bands beside the
LongBench category it stands in for, lengths.md every length.
"""
from edge_jax.infer.longctx import method_cells
from edge_jax.papers.edgeinfinite.grid import TABLE1, TABLE1_EXPLANATIONS, baseline_cell, edgeinfinite_cell, grid


def get_grid(preset: str) -> dict:
    cells = method_cells(baseline_cell, {"edgeinfinite": edgeinfinite_cell()})  # every KV_METHODS entry
    return grid(preset, "edgeinfinite_main",
                "EdgeInfinite Table 1: long-context scores vs KV-cache baselines at a similar budget",
                cells, TABLE1, "EdgeInfinite Table 1 (Overall Avg)",
                "Paper: BlueLM-3B on LongBench, baselines at a 2048-token cache against EdgeInfinite's ~1524 on "
                "average. Ours: synthetic tasks standing in for LongBench's categories (see categories.md); "
                "val_loss is on 800-token windows of the gate's data (the base with full attention for the "
                "baselines, the segmented memory path for EdgeInfinite).", TABLE1_EXPLANATIONS)
