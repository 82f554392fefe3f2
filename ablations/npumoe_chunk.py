"""NPUMoE §5.8 "Which prefill chunk size to choose?": the prefill chunk under the full NPUMoE plan.

    edge-jax grid ablations/npumoe_chunk.py --preset tiny --seeds 2

Capacities scale with the chunk (base = chunk * k / E); each cell calibrates its own plan (tiers,
groups of 4, residency).
"""
from edge_jax.papers.npumoe.grid import ABLATION, cell, grid

CHUNKS = (128, 256, 512, 1024)
ALL = {k.split(".", 1)[1]: v for k, v in ABLATION["all"].items()}
CELLS = {f"chunk{c}": cell(**ALL, chunk=c) for c in CHUNKS}


def get_grid(preset: str) -> dict:
    return grid(preset, "npumoe_chunk", "NPUMoE §5.8: prefill chunk size", CELLS,
                {"metric": "stated ordering, no numbers", "higher_is_better": False,
                 "values": dict.fromkeys(CELLS), "order": [f"chunk{c}" for c in reversed(CHUNKS)],
                 "source": "NPUMoE §5.8: 'Larger chunks are more effective for long-context prefill'"},
                "The paper sweeps 256/512 (1K prompts) and 512/1024 (4K prompts) and finds larger chunks "
                "better for long prefill, up to an upper bound; the ordering compared is larger = faster.")
