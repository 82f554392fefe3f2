"""Learning-rate schedule: cosine vs WSD vs WSDC (PLM §4.2, Table 23).

    edge-jax grid ablations/lr_schedule.py --preset tiny --seeds 2

PLM pre-trains with WSDC: linear warm-up over 1% of the steps to a peak of 3e-4,
stable at the peak, decay to 3e-5, then a constant tail. Its three pre-training
phases use 1.65T, 550B and 280B tokens (PLM Tables 2-4; 2.48T in all), which fix
the fractions of the run spent decaying (550/2480) and in the tail (280/2480).
"""
PRESETS = ("tiny", "paper")

CELLS = {
    "cosine": {"train.schedule": "cosine"},
    "wsd": {"train.schedule": "wsd"},
    "wsdc": {"train.schedule": "wsdc"},
}

# Paper preset: PLM's schedule on the Qwen3-0.6B baseline. 50k steps is the
# baseline's own paper budget; warm-up is PLM's 1% of it.
PAPER_STEPS = 50_000
PAPER_SCHEDULE = {
    "train.steps": PAPER_STEPS,
    "train.warmup_steps": PAPER_STEPS // 100,   # "for 1% of the total steps"
    "train.lr": 3e-4,                           # peak
    "train.min_lr": 3e-5,                       # decay target and WSDC tail
    "train.decay_fraction": round(550 / 2480, 4),  # phase 2 tokens / all tokens
    "train.tail_fraction": round(280 / 2480, 4),   # phase 3 tokens / all tokens
}

NOTES = (
    "PLM reports no numbers comparing schedules and states no explicit ranking: it "
    "says it 'empirically investigates' WSDC and adopts it, following MiniCPM (its "
    "ref. [8]), which introduced WSD as an alternative to cosine. The paper ordering "
    "used here (wsdc best, then wsd, then cosine) is therefore the one implied by that "
    "choice, given as paper.order without values; treat agreement or disagreement as "
    "weak evidence. In PLM the decay and constant phases also switch to "
    "higher-quality data, which this ablation does not do: only the schedule changes. "
    "Cosine decays to the same min_lr over the whole run; wsd uses the same decay "
    "fraction as wsdc but ends its decay at the last step instead of holding a tail. "
    "At tiny scale the schedule shape (warm-up, decay and tail fractions) comes from "
    "configs/lm.py as is."
)


def get_grid(preset: str) -> dict:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    if preset == "tiny":
        base, base_overrides = "configs/lm.py:size=tiny", {}
    else:
        base, base_overrides = "configs/lm.py:size=qwen3_0p6b", dict(PAPER_SCHEDULE)
    return {
        "name": "lr_schedule",
        "title": "Learning-rate schedule: cosine vs WSD vs WSDC (PLM §4.2)",
        "base": base,
        "base_overrides": base_overrides,
        "cells": CELLS,
        "metric": "val_loss",
        "lower_is_better": True,
        "extra_metrics": ["val_ppl", "train_loss", "tokens_per_s"],
        "paper": {
            "metric": "implied ranking, no numbers",
            "values": {"cosine": None, "wsd": None, "wsdc": None},
            "higher_is_better": True,
            "order": ["wsdc", "wsd", "cosine"],
            "source": "PLM §4.2 and Table 23; WSDC adopted, not compared",
        },
        "notes": NOTES,
    }
