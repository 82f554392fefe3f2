"""Everything a run needs, built from the config: tokenizer, vocabulary, mesh, model, optimizer."""
from __future__ import annotations

import dataclasses
import json
import os

import ml_collections

from edge_jax.config import ConfigError
from edge_jax.data import get_tokenizer
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.sharding import check_divisible, make_mesh
from edge_jax.train.hooks import MODEL_HOOKS
from edge_jax.train.optim import make_optimizer
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.storage import epath


@dataclasses.dataclass
class RunSetup:
    config: ml_collections.ConfigDict
    tokenizer: object
    mesh: object
    model: DecoderLM
    tx: object
    schedule: object


VOCAB_MULTIPLE = 64  # independent of the mesh, so every mesh builds the same model


def resolve_vocab(config, tokenizer) -> None:
    """vocab_size 0 -> the tokenizer's size rounded up to a multiple of 64; too small -> error."""
    need = tokenizer.vocab_size
    if config.model.vocab_size == 0:
        config.model.vocab_size = -(-need // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    elif config.model.vocab_size < need:
        raise ConfigError(f"model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's {need} "
                          f"({config.data.tokenizer}); set model.vocab_size=0 or >= {need}")


def resolve_config(config):
    """``(config copy with model.vocab_size resolved, tokenizer)``; the input is left untouched."""
    config = ml_collections.ConfigDict(config.to_dict())
    tok = get_tokenizer(config.data.tokenizer, config.data.name, config.data.data_dir)
    resolve_vocab(config, tok)
    return config, tok


def check_tokenizer(workdir: str, tokenizer, config, write: bool = False) -> None:
    """The tokenizer must be the one the workdir's checkpoints were trained with (its name carries
    a hash of the model file); ``write`` records it for a new run."""
    path = os.path.join(workdir, "tokenizer.json")
    now = {"name": tokenizer.name, "vocab_size": tokenizer.vocab_size}
    if epath(path).exists():
        then = json.loads(epath(path).read_text())
        if then.get("name") != now["name"]:
            raise ConfigError(f"checkpoint in {workdir} was trained with tokenizer {then.get('name')} "
                              f"({then.get('vocab_size')} ids) but data.tokenizer={config.data.tokenizer!r} now gives "
                              f"{now['name']} ({now['vocab_size']} ids); restore that tokenizer or use a new workdir")
    elif write:
        write_json_atomic(path, now)
    if tokenizer.vocab_size > config.model.vocab_size:
        raise ConfigError(f"checkpoint in {workdir} has a {config.model.vocab_size}-row vocabulary, fewer than "
                          f"the tokenizer's {tokenizer.vocab_size} ids; use the tokenizer it was trained with")


def model_config(config) -> ModelConfig:
    """The model's static description, with what the registered model hooks add to it (e.g. an
    execution plan; :data:`edge_jax.train.hooks.MODEL_HOOKS`)."""
    cfg = ModelConfig.from_config(config.model)
    for _, hook in MODEL_HOOKS.items():
        cfg = hook(config, cfg)
    return cfg


def build(config, devices=None) -> RunSetup:
    config, tok = resolve_config(config)
    mesh = make_mesh(config.mesh, devices)
    check_divisible(config, mesh)
    model = DecoderLM(model_config(config))
    tx, schedule = make_optimizer(config.train)
    return RunSetup(config, tok, mesh, model, tx, schedule)
