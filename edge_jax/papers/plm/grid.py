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
    "zero_shot_avg is the mean zero-shot accuracy over code_cloze and longctx_mc (4-way, chance 0.25; "
    "docs/eval.md); the documents scored are in the line from the records."
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


RECORD_NOTES = "edge_jax.papers.plm.grid:record_notes"  # the ablation files' "record_notes"


def _values(records: list[dict], get) -> str:
    """``get(record)`` over the records: ``x`` when all agree, else ``x in n, y in m``."""
    counts: dict = {}
    for r in records:
        value = get(r)
        counts[value] = counts.get(value, 0) + 1
    if len(counts) == 1:
        return str(next(iter(counts)))
    return ", ".join(f"{v} in {n}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _documents(task: str, limit: int) -> str:
    from edge_jax.eval.builtin import CODE_DOCS, LONGCTX_DOCS
    full = {"code_cloze": CODE_DOCS, "longctx_mc": LONGCTX_DOCS}.get(task)
    if full is None:
        return f"{task} the first {limit}" if limit else f"{task} all"
    if limit and limit < full:
        return f"{task} the first {limit} (of up to {full:,})"
    return f"{task} all ({'up to ' if task == 'code_cloze' else ''}{full:,})"


def record_notes(grid, records: list[dict]) -> str:
    """What the PLM records were made with: training steps and batch, and the zero-shot documents scored
    (``eval.limit``; built-in task sizes from :mod:`edge_jax.eval.builtin`)."""
    cfg = [r.get("config") or {} for r in records]
    steps = _values(records, lambda r: (r.get("metrics") or {}).get("steps", "?"))
    batch = _values(records, lambda r: "{batch_size} x {seq_len}".format(**{"batch_size": "?", "seq_len": "?",
                                                                            **(r.get("config") or {}).get("data", {})}))
    text = f"{len(records)} records, trained {steps} steps of {batch} tokens."
    limits = sorted({(c.get("eval") or {}).get("limit", 0) for c in cfg})
    tasks = sorted({t for c in cfg for t in str((c.get("eval") or {}).get("zero_shot", "")).split(",") if t})
    if tasks:
        scored = "; ".join(f"with eval.limit={limit}: " + ", ".join(_documents(t, limit) for t in tasks)
                           for limit in limits)
        text += f" zero_shot_avg scored {scored} documents."
    return text
