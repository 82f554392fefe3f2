"""EdgeInfinite Table 1: EdgeInfinite vs FullKV, StreamingLLM, SnapKV and PyramidKV.

    edge-jax grid ablations/edgeinfinite_main.py --preset tiny --seeds 3

Cells are evaluation only; the base LM and the gate are the grid's stages (trained once and shared
with edgeinfinite_tokens). The table ranks cells by exact match with the gold answer's NLL beside it;
categories.md (post hook) has every category beside the LongBench category it stands in for.
"""
from edge_jax.papers.edgeinfinite.grid import TABLE1, TABLE1_EXPLANATIONS, baseline_cell, edgeinfinite_cell, grid


def get_grid(preset: str) -> dict:
    cells = {m: baseline_cell(m) for m in ("fullkv", "streamingllm", "snapkv", "pyramidkv")}
    return grid(preset, "edgeinfinite_main",
                "EdgeInfinite Table 1: long-context scores vs KV-cache baselines at a similar budget",
                {**cells, "edgeinfinite": edgeinfinite_cell()}, TABLE1, "EdgeInfinite Table 1 (Overall Avg)",
                "Paper: BlueLM-3B on LongBench, baselines at a 2048-token cache against EdgeInfinite's ~1524 on "
                "average. Ours: synthetic tasks standing in for LongBench's categories (see categories.md); "
                "val_loss is on 800-token windows of the gate's data (the base with full attention for the "
                "baselines, the segmented memory path for EdgeInfinite).", TABLE1_EXPLANATIONS)
