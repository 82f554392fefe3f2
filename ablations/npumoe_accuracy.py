"""NPUMoE §5.6 / Table 3: accuracy against dropless execution at 10-20% token drop rates.

    edge-jax grid ablations/npumoe_accuracy.py --preset tiny --seeds 2

Uniform capacities of 1.5, 2 and 2.5 times the base capacity (chunk * k / E = 64 at chunk 512) force
drops (the tiny model routes skewed within a chunk: a trial at 48 rows dropped 53% of the copies).
Overflow is pruned by saliency (the L2 norm of the attention output, NPUMoE §3.2, lowest first) or,
for comparison, by position (the latest tokens of a chunk first, as GShard-style capacity does).
The full NPUMoE plan ("npumoe_all") is there too. The metric is the change in next-token accuracy
(points) on the validation batches against the same weights run dropless; drop % is beside it.
"""
from edge_jax.papers.npumoe.grid import ABLATION, cell, grid

CAPACITIES = (96, 128, 160)
CELLS = {f"c{c}_{drop}": cell(strategy="uniform", capacity=c, group=16, drop=drop)
         for c in CAPACITIES for drop in ("saliency", "position")}
CELLS["npumoe_all"] = cell(**{k.split(".", 1)[1]: v for k, v in ABLATION["all"].items()})


def get_grid(preset: str) -> dict:
    return grid(preset, "npumoe_accuracy", "NPUMoE §5.6: accuracy against dropless under token drops", CELLS,
                {"metric": "accuracy loss under 10-20% drops: < 1.1% (no per-cell numbers)",
                 "higher_is_better": True, "values": dict.fromkeys(CELLS),
                 "source": "NPUMoE §5.6 / Table 3"},
                "The paper's claim is about task accuracy on HellaSwag, BoolQ and RULER with PhiMoE; ours is "
                "next-token accuracy of a tiny byte-level model, whose every token counts, so drops cost more.",
                metric="moe/accuracy_change", lower_is_better=False)
