"""Dense Qwen3-style baseline LM.

    edge-jax train --config configs/lm.py:size=tiny --workdir /tmp/lm --config.train.steps=200

Sizes: tiny, small (CPU), qwen3_0p6b, qwen3_1p7b, qwen3_4b (MeKi Table 5 shapes).
"""
from edge_jax.config import ConfigError, base_config, parse_arg
from edge_jax.models.presets import MODEL_SIZES, TRAIN_PRESETS


def get_config(arg=None):
    a = parse_arg(arg, size="tiny")
    if a.size not in MODEL_SIZES:
        raise ConfigError(f"unknown size {a.size!r}; valid: {', '.join(MODEL_SIZES)}")
    c = base_config()
    c.model.update(MODEL_SIZES[a.size])
    for section, values in TRAIN_PRESETS[a.size].items():
        c[section].update(values)
    return c
