"""MeKi Table 2: PLE vs Engram vs MeKi at a similar ROM size (0.6B scale).

    edge-jax grid ablations/meki_vs_ple_engram.py --preset tiny --seeds 3

PLE uses d_ple = d_mem (ROM L*|V|*d_mem, as MeKi); Engram's tables are sized to a similar ROM
(configs/meki.py, layers/engram.py). The baseline row is Table 1's.
"""
from edge_jax.layers.token_memory.ngram_hash import engram_placement
from edge_jax.papers.meki.grid import BASELINE, MEKI, ZERO_SHOT, meki_grid

# (n_layers, vocab) of the preset's base model; placed as configs/meki.py:memory=engram places it.
SHAPES = {"tiny": (4, 4096), "paper": (28, 151_680)}


def engram_cell(preset: str) -> dict:
    at, size = engram_placement(*SHAPES.get(preset, SHAPES["tiny"]), (2, 3), 4)
    return {"model.memory": "engram", "model.engram_layers": at, "model.engram_table_size": size}


def get_grid(preset: str) -> dict:
    return meki_grid(
        preset, name="meki_vs_ple_engram", title="MeKi Table 2: PLE vs Engram vs MeKi at matched ROM",
        cells={"baseline": BASELINE, "ple": {"model.memory": "ple"}, "engram": engram_cell(preset),
               "meki": MEKI},
        paper={"metric": ZERO_SHOT, "higher_is_better": True, "source": "MeKi Tables 1-2 (0.6B)",
               "values": {"baseline": 53.0, "ple": 53.5, "engram": 53.7, "meki": 55.5}})
