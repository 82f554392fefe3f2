"""MeKi Fig. 6: validation loss against memory size (d_mem), with a log-linear fit.

    edge-jax grid ablations/meki_dmem_scaling.py --preset tiny --seeds 3

The paper varies d_mem over 64, 96, 128, 160, 192 at 0.6B (0.5x to 1.5x its chosen 128); the
tiny preset takes the two ends and the middle of that range (0.5x, 1x, 1.5x of its d_mem 64), three
points to keep the CPU grid short; the paper preset has all five. Memory size = L * |V| * d_mem (§5.4). After
the grid, ``post`` fits val_loss = a + b * ln(memory size) and writes fit.md and scaling.png.
"""
from edge_jax.papers.meki.grid import meki_grid

D_MEM = {"tiny": (32, 64, 96), "paper": (64, 96, 128, 160, 192)}


def get_grid(preset: str) -> dict:
    dims = D_MEM.get(preset, D_MEM["tiny"])
    cells = {f"d_mem_{d}": {"model.d_mem": d} for d in dims}
    grid = meki_grid(
        preset, name="meki_dmem_scaling", title="MeKi Fig. 6: validation loss vs memory size",
        cells=cells,
        paper={"metric": "final validation loss (figure, no numbers)", "higher_is_better": False,
               "source": "MeKi §5.4, Fig. 6", "values": {c: None for c in cells},
               "order": [f"d_mem_{d}" for d in reversed(dims)]},
        notes="The paper reports loss falling log-linearly with memory size; ordering = larger memory better.")
    grid["post"] = "edge_jax.papers.meki.scaling:write_memory_fit"
    return grid
