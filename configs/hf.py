"""A model from Hugging Face: train from an imported checkpoint (``base=``), or size one from its
``config.json`` alone (``hf=``: no weights, for ``edge-jax params`` and ``edge-jax compile``).

    edge-jax hf import /ckpt/Qwen3-0.6B --workdir /runs/qwen3
    edge-jax train --config configs/hf.py:base=/runs/qwen3 --workdir /runs/qwen3_ft --config.train.steps=200
    edge-jax params --config configs/hf.py:hf=configs/hf/phi-3.5-moe.json

``base=W``: W's model and tokenizer, ``init_from=W``, everything else at the defaults (override with
``--config.*``); paper configs take the same ``base=`` (configs/edgeinfinite.py, configs/npumoe.py).
``hf=PATH``: the ``model.*`` keys its family gives for ``PATH`` (a config.json or a checkpoint directory),
in the checkpoint's dtype; ``configs/hf/`` holds the papers' real models' configs.
"""
import json
import os

from edge_jax.config import ConfigError, base_config, parse_arg
from edge_jax.train.workdir import on_base


def _hf_model(c, path: str):
    from edge_jax.interop.convert import model_config_from_hf

    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise ConfigError(f"hf={path}: no such config.json; pass an HF config.json or checkpoint directory")
    with open(file) as f:
        hf_config = json.load(f)
    dtype = "bfloat16" if hf_config.get("torch_dtype", hf_config.get("dtype")) == "bfloat16" else "float32"
    c.model.update({k: v for k, v in model_config_from_hf(hf_config, dtype)[2].as_keys().items() if k in c.model})
    return c


def get_config(arg=None):
    a = parse_arg(arg, base="", hf="")
    if bool(a.base) == bool(a.hf):
        raise ConfigError("configs/hf.py needs one of base=/path/to/workdir (an import or a run to start from) "
                          "or hf=/path/to/config.json (a model to size, no weights)")
    return on_base(base_config(), a.base) if a.base else _hf_model(base_config(), a.hf)
