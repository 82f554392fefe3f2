"""What the PLM ablation files (ablations/plm_*.py) share: base configs, presets, twin cells.

Every PLM grid starts from ``configs/plm.py`` (MLA + ReLU² + WSDC), so the default PLM cell has the
same config in every grid and is trained once (the runner reuses identical runs across grids).
"""
from __future__ import annotations

from edge_jax.grid.paper import PaperGrid

SIZE = {"tiny": "tiny", "paper": "1p8b"}

# Zero-shot tasks scored after every cell (edge_jax.eval; grid key "zero_shot" adds the zero_shot_avg
# column): at tiny the built-in stand-ins the pystdlib-trained models can know (code_cloze; longctx_mc
# needs only copying from the context), at the paper preset the ten lm-eval benchmarks (their files:
# --set eval.data_dir=DIR, docs/eval.md).
ZERO_SHOT_TASKS = {"tiny": "code_cloze,longctx_mc", "paper": "meki10"}

TINY_NOTES = (
    "Tiny preset: PLM-shaped decoder (MLA d_c 32, d_rope 16, 4 heads of 32, d_model 128, 4 layers, "
    "ReLU² FFN 512, tied embeddings), 300 steps of 16 x 128 byte tokens of pystdlib with WSDC; "
    "twins with another attention or FFN keep the non-embedding parameter count by adjusting d_ff. "
    "The sparsity sweep (Algorithm 1) runs on 4 validation batches after training: sparsity_rate at "
    "Δppl <= 1% of the unmasked perplexity (scale-free), sparsity_rate_abs at the paper's Δppl <= 1. "
    "zero_shot_avg is the mean zero-shot accuracy over code_cloze and longctx_mc (every built-in "
    "document: 1,000 and 200, 4-way, chance 0.25; docs/eval.md)."
)

GRID = PaperGrid({preset: f"configs/plm.py:size={size}" for preset, size in SIZE.items()}, notes={"tiny": TINY_NOTES})
PRESETS = GRID.presets
base, notes = GRID.base, GRID.notes  # base(preset), notes(preset, text): the grid's text, then TINY_NOTES


def variant(preset: str, attention: str = "mla", ffn: str = "relu2") -> dict:
    """A grid cell's overrides: PLM with another attention or FFN at matched parameters."""
    from edge_jax.models.presets import sized_config
    from edge_jax.papers.plm.variants import plm_variant
    model = sized_config(f"plm_{SIZE[preset]}").model
    return {f"model.{k}": v for k, v in plm_variant(model, attention, ffn).items()}


def zero_shot(preset: str, grid: dict) -> dict:
    """``grid`` with the preset's zero-shot tasks scored after every cell (the zero_shot_avg column)."""
    return {**grid, "zero_shot": ZERO_SHOT_TASKS[preset]}
