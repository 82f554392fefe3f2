"""Train from a workdir's model, e.g. an imported HF checkpoint (``edge-jax hf import``): its model and
tokenizer, ``init_from`` set to it, everything else at the defaults (override with ``--config.*``).

    edge-jax hf import /ckpt/Qwen3-0.6B --workdir /runs/qwen3
    edge-jax train --config configs/hf.py:base=/runs/qwen3 --workdir /runs/qwen3_ft --config.train.steps=200

Paper configs take the same ``base=`` argument (configs/edgeinfinite.py, configs/npumoe.py).
"""
from edge_jax.config import ConfigError, base_config, parse_arg
from edge_jax.train.workdir import on_base


def get_config(arg=None):
    a = parse_arg(arg, base="")
    if not a.base:
        raise ConfigError("configs/hf.py needs the workdir to start from: --config configs/hf.py:base=/path/to/workdir")
    return on_base(base_config(), a.base)
