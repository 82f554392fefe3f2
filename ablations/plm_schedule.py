"""Learning-rate schedule on PLM: cosine vs WSD vs WSDC (PLM §4.2, Table 23).

    edge-jax grid ablations/plm_schedule.py --preset tiny --seeds 3

PLM pre-trains with WSDC: linear warm-up over 1% of the steps to a peak of 3e-4, stable at the
peak, decay to 3e-5, then a constant tail. Its three pre-training phases use 1.65T, 550B and 280B
tokens (PLM Tables 2-4; 2.48T in all), which fix the fractions of the run spent decaying
(550/2480) and in the tail (280/2480); configs/plm.py sets them (models/presets.py WSDC).
"""
from edge_jax.papers.plm.grid import RECORD_NOTES, base, notes, zero_shot

NOTES = (
    "PLM reports no numbers comparing schedules and states no explicit ranking: it "
    "says it 'empirically investigates' WSDC and adopts it, following MiniCPM (its "
    "ref. [8]), which introduced WSD as an alternative to cosine. The paper ordering "
    "used here (wsdc best, then wsd, then cosine) is therefore the one implied by that "
    "choice, given as paper.order without values; treat agreement or disagreement as "
    "weak evidence. In PLM the decay and constant phases also switch to "
    "higher-quality data, which this ablation does not do: only the schedule changes. "
    "Cosine decays to the same min_lr over the whole run; wsd uses the same decay "
    "fraction as wsdc but ends its decay at the last step instead of holding a tail."
)


def get_grid(preset: str) -> dict:
    return zero_shot(preset, {
        "name": "plm_schedule",
        "title": "Learning-rate schedule on PLM: cosine vs WSD vs WSDC (PLM §4.2)",
        "base": base(preset), "base_overrides": {},
        "cells": {"cosine": {"train.schedule": "cosine"}, "wsd": {"train.schedule": "wsd"},
                  "wsdc": {"train.schedule": "wsdc"}},
        "metric": "val_loss", "lower_is_better": True,
        "extra_metrics": ["val_ppl", "train_loss"],
        "paper": {
            "metric": "implied ranking, no numbers",
            "values": {"cosine": None, "wsd": None, "wsdc": None},
            "higher_is_better": True,
            "order": ["wsdc", "wsd", "cosine"],
            "source": "PLM §4.2 and Table 23; WSDC adopted, not compared",
        },
        "record_notes": RECORD_NOTES,
        "notes": notes(preset, NOTES),
        "explanations": {
            "wsdc>wsd": "PLM's constant phase trains on up-sampled high-quality and instruction-like data (§4.2); "
                        "here it sees the same data, so it only moves the last 11% of the steps to min_lr",
        },
    })
