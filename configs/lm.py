"""Dense Qwen3-style baseline LM.

    edge-jax train --config configs/lm.py:size=tiny --workdir /tmp/lm --config.train.steps=200

Sizes: tiny, small (CPU), qwen3_0p6b, qwen3_1p7b, qwen3_4b (MeKi Table 5 shapes).
"""
from edge_jax.config import parse_arg
from edge_jax.models.presets import sized_config


def get_config(arg=None):
    return sized_config(parse_arg(arg, size="tiny").size)
