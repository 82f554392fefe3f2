"""Config schema, loading (big_vision style ``file.py:arg``), overrides, validation and upgrades.

A config's ``task`` (``lm`` when absent) picks its schema from :data:`edge_jax.registry.CONFIG_TASKS`.
The ``lm`` schema is assembled from declarations: the run's core keys below (data, train, mesh)
and every :class:`~edge_jax.registry.Section` that code beside a feature registered (the model's
keys beside each layer, a paper's own sections in ``edge_jax/papers/<paper>/config.py``), so
every key is declared once. Every error raised here is a :class:`ConfigError` whose message is
one line naming the problem and the fix.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import math
import os
import re
from typing import Any, Iterable, Mapping

import ml_collections

from edge_jax import plugins
from edge_jax.config_ranges import check_train_ranges
from edge_jax.errors import ConfigError, UserError, one_line, unknown
from edge_jax.registry import CONFIG_TASKS, SECTIONS, ConfigTask

__all__ = ["ConfigError", "apply_overrides", "base_config", "flatten", "load_config", "parse_arg",
           "schema_defaults", "task_of", "unflatten", "upgrade_config", "validate"]

SCHEDULES = ("cosine", "wsd", "wsdc", "constant")
MESH_AXES = ("data", "fsdp", "tensor")


@dataclasses.dataclass(frozen=True)
class DataKeys:
    """``data.*``: the dataset (edge_jax.data), its tokenizer and batch shape. ``stream``: ``auto``
    streams file corpora (parquet/jsonl/text) that have no prepared token shards and reads everything
    else from prepared shards (built on first use); ``on`` / ``off`` force one way. ``workers``: grain
    worker processes that read and tokenise a stream; ``shuffle_windows``: the windows a stream row
    shuffles at a time; ``tokens_dir``: where prepared token shards live (default <data_dir>/tokens;
    may be gs://...); ``windows_per_read``: prepared shards are shuffled in blocks of this many consecutive
    windows, each block one read (1: single windows; more: fewer, larger requests to a bucket)."""
    name: str = "pystdlib"
    tokenizer: str = "byte"
    seq_len: int = 128
    batch_size: int = 16
    data_dir: str = ""
    text_key: str = "text"
    facts_entities: int = 2000
    longctx_length: int = 4096
    longctx_examples: int = 200
    stream: str = "auto"
    workers: int = 0
    shuffle_windows: int = 64
    windows_per_read: int = 1
    tokens_dir: str = ""


@dataclasses.dataclass(frozen=True)
class TrainKeys:
    """``train.*``: optimisation, logging, checkpoints. ``trainable`` is a regex over parameter paths
    (``layers_0/attn/q_proj/kernel``): params it does not fully match stay frozen; ``lr_multipliers``
    are ``"REGEX=MULT"`` strings (the first full match scales that param's learning rate)."""
    steps: int = 200
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    schedule: str = "cosine"
    decay_fraction: float = 0.2
    tail_fraction: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip_norm: float = 1.0
    grad_accum: int = 1
    loss_chunk: int = 0    # > 0: LM head + cross-entropy this many positions at a time (models/head.py)
    log_every: int = 10
    eval_every: int = 50
    eval_batches: int = 20
    ckpt_every: int = 50
    keep_ckpts: int = 3
    qa_questions: int = 0  # after training, exact match on this many questions (-1: all; needs facts/longctx)
    profile_start: int = 5  # the first step a profiler trace covers (steps count from 1; train/telemetry.py)
    profile_steps: int = 0  # > 0: trace this many steps into <workdir>/profile (0: no trace)
    trainable: str = ".*"
    lr_multipliers: tuple = ()


@dataclasses.dataclass(frozen=True)
class MeshKeys:
    """``mesh.*``: device mesh axis sizes (-1: the rest of the devices; edge_jax.sharding)."""
    data: int = -1
    fsdp: int = 1
    tensor: int = 1


def _section_dict(section: str, core=None) -> dict:
    out = {f.name: f.default for f in dataclasses.fields(core)} if core else {}
    for s in sorted((s for _, s in SECTIONS.items() if s.section == section), key=lambda s: s.order):
        for key, value in s.defaults().items():
            if key in out:
                raise ValueError(f"config key {section}.{key} is declared twice; declare each key once")
            out[key] = value
    return out


def base_config() -> ml_collections.ConfigDict:
    """The ``lm`` schema with defaults; every valid key appears here."""
    plugins.load()  # every section registered
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model = ml_collections.ConfigDict(_section_dict("model"))
    c.data = ml_collections.ConfigDict(_section_dict("data", DataKeys))
    c.train = ml_collections.ConfigDict(_section_dict("train", TrainKeys))
    # Start from the params of another run's latest checkpoint (a training workdir), or of its checkpoint
    # at step init_step (> 0); params the model has and the checkpoint lacks keep their initialisation
    # if train.trainable trains them.
    c.init_from = ""
    c.init_step = 0
    core = {"model", "data", "train", "mesh"}
    for name in dict.fromkeys(s.section for _, s in SECTIONS.items() if s.section not in core):
        c[name] = ml_collections.ConfigDict(_section_dict(name))
    c.mesh = ml_collections.ConfigDict(_section_dict("mesh", MeshKeys))
    return c


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parse a ``get_config`` argument like ``"size=tiny,runlocal"`` against typed defaults."""
    out = ml_collections.ConfigDict(dict(defaults))
    if not arg:
        return out
    for item in arg.split(","):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ConfigError(unknown("config argument", key, defaults))
        out[key] = _coerce(raw if _ else "True", defaults[key], key)
    return out


def _coerce(raw: Any, current: Any, key: str) -> Any:
    """``raw`` (a command-line string, or a value from Python: a grid's overrides) as the type of the key's
    current value; a value of another kind is a ConfigError naming the key and the kind it needs."""
    if isinstance(current, bool):
        if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "false", "0", "no"):
            return raw.lower() in ("true", "1", "yes")
        if isinstance(raw, bool):
            return raw
        raise ConfigError(f"config key {key!r} needs true/false, got {raw!r}")
    if isinstance(current, (int, float)):
        val = _literal(raw)
        if not isinstance(val, (int, float)) or isinstance(val, bool):
            raise ConfigError(f"config key {key!r} needs a number, got {raw!r}")
        if isinstance(current, int) and isinstance(val, float) and not val.is_integer():
            raise ConfigError(f"config key {key!r} needs an integer, got {raw!r}")
        return type(current)(val)
    if isinstance(current, (tuple, list)):
        val = _literal(raw)
        if not isinstance(val, (tuple, list)):
            raise ConfigError(f"config key {key!r} needs a list like [1,2], got {raw!r}")
        return type(current)(val)
    if isinstance(current, str) and not isinstance(raw, str):
        raise ConfigError(f"config key {key!r} needs a string, got {raw!r}")
    return raw


def _literal(raw: Any) -> Any:
    """A command-line string read as a Python literal (None when it is not one); other values as they are."""
    if not isinstance(raw, str):
        return raw
    try:
        return ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def flatten(c, prefix: str = "", sep: str = ".") -> dict:
    """``{"train.steps": 200, ...}`` from a nested ConfigDict or dict (keys joined by ``sep``; ``"/"`` gives
    param paths such as ``layers_0/attn/q_proj/kernel`` from a params tree)."""
    out = {}
    for k, v in c.items():
        nested = isinstance(v, (Mapping, ml_collections.ConfigDict))
        out.update(flatten(v, f"{prefix}{k}{sep}", sep) if nested else {f"{prefix}{k}": v})
    return out


def flat_json(c) -> dict:
    """:func:`flatten` of ``c`` as it reads back from config.json (tuples become lists, other
    non-JSON values their ``str``): the form two configs are compared in."""
    return flatten(json.loads(json.dumps(c.to_dict() if hasattr(c, "to_dict") else c, default=str)))


def unflatten(flat: Mapping[str, Any], sep: str = ".") -> dict:
    """The nested dict of a ``{"train.steps": 200, ...}`` flat one (keys split at ``sep``)."""
    out: dict = {}
    for key, value in flat.items():
        *path, leaf = key.split(sep)
        node = out
        for p in path:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def apply_overrides(c: ml_collections.ConfigDict, overrides: Mapping[str, Any] | Iterable[str]):
    """Apply ``{"train.steps": 200}`` or ``["train.steps=200"]`` in place; unknown keys fail."""
    if not isinstance(overrides, Mapping):
        pairs = {}
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"override {item!r} needs the form key=value")
            pairs[key.strip()] = raw
        overrides = pairs
    valid = list(flatten(c))
    for key, raw in overrides.items():
        if key not in valid:
            raise ConfigError(unknown("config key", key, valid))
        *path, leaf = key.split(".")
        node = c
        for p in path:
            node = node[p]
        node[leaf] = _coerce(raw, node[leaf], key)
    return c


def task_of(c) -> str:
    """The config's task (``lm`` when it names none)."""
    return c.get("task", "lm") if hasattr(c, "get") else "lm"


def schema_defaults(c) -> ml_collections.ConfigDict:
    """The schema ``c`` follows, at its defaults."""
    return CONFIG_TASKS.get(task_of(c)).schema()


def _check_keys(c, path: str) -> None:
    """A config file's ``get_config`` may only set keys its schema declares."""
    known = set(flatten(schema_defaults(c)))
    extra = sorted(set(flatten(c)) - known)
    if extra:
        raise ConfigError(f"{path}: {unknown('config key', extra[0], known)} (get_config may only set declared keys)")


def load_config(spec: str, overrides: Mapping[str, Any] | Iterable[str] = ()) -> ml_collections.ConfigDict:
    """Load ``path/to/config.py[:arg]``, apply overrides, validate, and return it."""
    plugins.load()  # every section, task and variant registered before the file runs
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass e.g. --config configs/lm.py:size=tiny")
    mod_spec = importlib.util.spec_from_file_location(f"_edge_jax_cfg_{abs(hash(path))}", path)
    if mod_spec is None or not path.endswith(".py"):
        raise ConfigError(f"config file {path!r} is not a Python file; pass e.g. --config configs/lm.py:size=tiny")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any failure of the user's file is theirs to fix
        raise ConfigError(f"config file {path!r} failed to load ({type(e).__name__}: {one_line(e)}); fix it") from e
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path!r} defines no get_config(arg); add one")
    try:
        c = module.get_config(arg or None)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"get_config({arg or None!r}) of {path!r} raised {type(e).__name__}: {one_line(e)}; "
                          "fix the config file or its argument") from e
    _check_keys(c, path)
    apply_overrides(c, overrides)
    CONFIG_TASKS.get(task_of(c)).validate(c)
    return c


def upgrade_config(old: Mapping) -> dict:
    """A config written by an older edge_jax (a workdir's ``config.json``, a record's ``config``)
    in today's keys: each section's ``renames`` and ``upgrade`` applied. Keys the schema gained
    since are left out (they read as their defaults)."""
    plugins.load()  # every section's renames
    flat = flatten(old)
    for _, section in SECTIONS.items():
        for before, after in section.renames.items():
            if before in flat:
                flat[after] = flat.pop(before)
        if section.upgrade is not None:
            section.upgrade(flat)
    _upgrade_train(flat)
    return unflatten(flat)


def _upgrade_train(flat: dict) -> None:
    """``train.trainable`` was ``all`` (every param) before it became a regex."""
    if flat.get("train.trainable") == "all":
        flat["train.trainable"] = ".*"


def validate(c: ml_collections.ConfigDict) -> None:
    """Check values and combinations of an ``lm`` config; raise a one-line ConfigError naming the conflict."""
    d, t = c.data, c.train
    if t.schedule not in SCHEDULES:
        raise ConfigError(unknown("train.schedule value", t.schedule, SCHEDULES))
    positive = {"data.seq_len": d.seq_len, "data.batch_size": d.batch_size, "train.steps": t.steps,
                "train.grad_accum": t.grad_accum, "train.lr": t.lr}
    if t.steps == 0:
        if not c.init_from:
            raise ConfigError("train.steps=0 only evaluates another run: set init_from=<workdir> or train.steps > 0")
        positive.pop("train.steps")  # evaluate another run's params without training
    for key, val in positive.items():
        if val <= 0:
            raise ConfigError(f"{key} must be positive, got {val}")
    for key in ("log_every", "eval_every", "ckpt_every"):
        if t[key] < 1:  # every k steps and the last; 0 would divide by zero after the first step
            raise ConfigError(f"train.{key}={t[key]} must be >= 1 (the final step is always included; to do it "
                              f"only then, set train.{key}={max(t.steps, 1)})")
    check_train_ranges(t)
    if t.keep_ckpts < 1:
        raise ConfigError(f"train.keep_ckpts={t.keep_ckpts} would keep no checkpoint of the trained model; set it "
                          ">= 1 (the newest checkpoints are kept, the final step's among them)")
    if c.init_step < 0 or (c.init_step and not c.init_from):
        raise ConfigError(f"init_step={c.init_step} picks a checkpoint step of init_from=<workdir>: set init_from "
                          "and a step >= 1, or init_step=0 for its latest")
    if d.stream not in ("auto", "on", "off"):
        raise ConfigError(unknown("data.stream value", d.stream, ("auto", "on", "off")))
    if d.windows_per_read < 1:
        raise ConfigError(f"data.windows_per_read={d.windows_per_read} must be >= 1 (1: every window on its own)")
    if d.workers < 0 or d.shuffle_windows < 1:
        raise ConfigError(f"data.workers={d.workers} must be >= 0 and data.shuffle_windows={d.shuffle_windows} >= 1")
    if d.batch_size % t.grad_accum:
        raise ConfigError(f"data.batch_size={d.batch_size} is not divisible by train.grad_accum={t.grad_accum}")
    if t.loss_chunk < 0 or (t.loss_chunk and d.seq_len % t.loss_chunk):
        raise ConfigError(f"train.loss_chunk={t.loss_chunk} must be 0 (off) or divide data.seq_len={d.seq_len}")
    if t.profile_start < 1 or t.profile_steps < 0:
        raise ConfigError(f"train.profile_start={t.profile_start} must be >= 1 (steps count from 1) and "
                          f"train.profile_steps={t.profile_steps} >= 0 (0: no profile)")
    if t.profile_steps and t.steps and t.profile_start > t.steps:
        raise ConfigError(f"train.profile_start={t.profile_start} is past train.steps={t.steps}, so no step would "
                          f"be profiled; set train.profile_start <= {t.steps} (or train.profile_steps=0)")
    if not 0 <= t.min_lr <= t.lr:
        raise ConfigError(f"train.min_lr={t.min_lr} must lie in [0, train.lr={t.lr}]")
    if t.steps and t.warmup_steps >= t.steps and t.schedule != "constant":
        raise ConfigError(f"train.warmup_steps={t.warmup_steps} must be below train.steps={t.steps}")
    if t.schedule in ("wsd", "wsdc"):
        tail = t.tail_fraction if t.schedule == "wsdc" else 0.0
        if not (0 < t.decay_fraction and t.decay_fraction + tail < 1 and tail >= 0):
            raise ConfigError(f"train.decay_fraction={t.decay_fraction} and train.tail_fraction={t.tail_fraction} "
                              "must be >= 0 and sum to less than 1")
    trainable_pattern(t.trainable)
    parse_lr_multipliers(t.lr_multipliers)
    for axis in MESH_AXES:
        if c.mesh[axis] == 0 or c.mesh[axis] < -1:
            raise ConfigError(f"mesh.{axis}={c.mesh[axis]}: use a positive size or -1 for 'the rest'")
    if sum(c.mesh[a] == -1 for a in MESH_AXES) > 1:
        raise ConfigError("only one of mesh.data / mesh.fsdp / mesh.tensor may be -1")
    for _, section in sorted(SECTIONS.items(), key=lambda kv: kv[1].order):
        if section.validate is not None:
            section.validate(c)


def trainable_pattern(pattern: str) -> re.Pattern:
    """``train.trainable`` compiled (a param trains iff its ``/``-joined path fully matches)."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"train.trainable={pattern!r} is not a regular expression ({e}); "
                          "e.g. train.trainable='layers_.*/attn/.*' (default '.*': every param)") from None


def parse_lr_multipliers(entries) -> tuple[tuple[re.Pattern, float], ...]:
    """``(compiled regex, multiplier)`` per ``train.lr_multipliers`` entry ``"REGEX=MULT"``."""
    out = []
    for entry in entries:
        pattern, sep, raw = str(entry).rpartition("=")
        try:
            mult = float(raw)
        except ValueError:
            mult = math.nan
        if not (sep and pattern and math.isfinite(mult) and mult > 0):
            raise ConfigError(f"train.lr_multipliers entry {entry!r} must read REGEX=MULT with a positive number "
                              "MULT, e.g. '.*/attn/.*=0.5'")
        try:
            out.append((re.compile(pattern), mult))
        except re.error as e:
            raise ConfigError(f"train.lr_multipliers entry {entry!r}: {pattern!r} is not a regular expression "
                              f"({e})") from None
    return tuple(out)


CONFIG_TASKS.register("lm", ConfigTask(schema=base_config, validate=validate))
