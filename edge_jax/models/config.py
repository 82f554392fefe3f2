"""The model's keys (``config.model``): the decoder's own, declared here, and every feature's,
declared once beside its layer (:class:`edge_jax.registry.Section` with ``section="model"``).

:class:`ModelConfig` is the frozen dataclass of all of them, made from those declarations when
this module is imported (after the layers below have registered) and made again, in place, when a
``model`` section registers later (:func:`refresh_model_config`, run before a ModelConfig is built),
so ``base_config()`` and the model read one declaration whatever the import order.
``ModelConfig.from_config`` refuses keys it does not know.
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError, unknown
from edge_jax.layers import ffn as _ffn
from edge_jax.layers import token_memory as _memory  # noqa: F401  (registers the memory kinds and their keys)
from edge_jax.layers.attention import kinds as attention_kinds
from edge_jax.layers.kernels import backend as _kernels  # noqa: F401  (registers model.kernels)
from edge_jax.layers.moe import layer as _moe  # noqa: F401  (registers the MoE keys)
from edge_jax.layers.moe.plan import MoEExec
from edge_jax.models.scan import check_remat, check_scan
from edge_jax.registry import SECTIONS, Section

DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class DecoderKeys:
    """The decoder's own ``model.*`` keys (Qwen3-style by default)."""
    vocab_size: int = 0  # 0: take it from the tokenizer
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    d_ff: int = 384
    rope_theta: float = 500_000.0
    qk_norm: bool = True
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    ffn: str = "swiglu"  # edge_jax.layers.ffn.FFN_KINDS
    dtype: str = "float32"
    param_dtype: str = "float32"
    init_std: float = 0.02
    attention: str = "gqa"  # edge_jax.layers.attention.kinds.ATTENTION_KINDS


def _validate(c) -> None:
    m = c.model
    for key in ("dtype", "param_dtype"):
        if m[key] not in DTYPES:
            raise ConfigError(unknown(f"model.{key} value", m[key], DTYPES))
    _ffn.FFN_KINDS.check(m.ffn)
    attention_kinds.ATTENTION_KINDS.check(m.attention)
    for key in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff"):
        if m[key] <= 0:
            raise ConfigError(f"model.{key} must be positive, got {m[key]}")
    if m.n_heads % m.n_kv_heads:
        raise ConfigError(f"model.n_heads={m.n_heads} is not a multiple of model.n_kv_heads={m.n_kv_heads}; "
                          "pick n_kv_heads dividing n_heads")
    if m.head_dim % 2:
        raise ConfigError(f"model.head_dim={m.head_dim} must be even for RoPE")
    if m.vocab_size < 0:
        raise ConfigError(f"model.vocab_size={m.vocab_size}: use 0 (from the tokenizer) or a positive size")


SECTIONS.register("decoder", Section("model", DecoderKeys, _validate, order=0))


@dataclasses.dataclass(frozen=True)
class LayerStackKeys:
    """How the layer stack compiles and what its backward pass keeps (:mod:`edge_jax.models.scan`):
    ``scan_layers`` runs one scanned block (params ``layers/...`` with a leading layer axis; needs
    identical layers); ``remat`` is one of :data:`~edge_jax.models.scan.REMAT_POLICIES`."""
    scan_layers: bool = False
    remat: str = "none"


def _validate_stack(c) -> None:
    check_remat(c.model.remat)
    check_scan(c.model)


SECTIONS.register("layer_stack", Section("model", LayerStackKeys, _validate_stack))


def model_sections() -> list[Section]:
    """The ``model`` sections registered so far, in merge order."""
    found = [s for _, s in SECTIONS.items() if s.section == "model"]
    return sorted(found, key=lambda s: s.order)


class ModelConfig:
    """Every model key (:class:`DecoderKeys` and each feature's declaration) with its default, plus
    ``moe_exec`` (how the MoE layers execute): a frozen dataclass whose fields are the registered
    ``model`` sections' keys. A section registered after this module was imported (a paper's, say)
    adds its keys the next time a ModelConfig is built (:func:`refresh_model_config`); the class
    object stays the same, so imports, ``isinstance`` and pickles keep working."""

    def __new__(cls, *args, **kwargs):
        refresh_model_config()
        return super().__new__(cls)

    def __post_init__(self):
        """The layer-stack keys checked on every ModelConfig (also one built or replaced in code,
        e.g. with calibrated MoE plans that may differ by layer)."""
        check_remat(self.remat)
        check_scan(self)

    def moe_layer_ids(self) -> tuple[int, ...]:
        """The layers whose FFN is a MoE (``moe_layers``, or every layer when it is empty)."""
        if self.moe_experts <= 0:
            return ()
        return tuple(self.moe_layers) if self.moe_layers else tuple(range(self.n_layers))

    def infini_spec(self):
        """EdgeInfinite's layer settings, or None without the memory gate."""
        return attention_kinds.InfiniSpec.of(self)

    def as_keys(self) -> dict:
        """Every ``model.*`` key with its value as ``config.model`` holds it (tuples as lists): the
        inverse of :meth:`from_config`."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self) if f.name != "moe_exec"}

    @classmethod
    def from_config(cls, model_cfg) -> "ModelConfig":
        """From ``config.model`` (a ConfigDict or dict); an unknown key is a one-line ConfigError."""
        refresh_model_config()
        known = {f.name for f in dataclasses.fields(cls)} - {"moe_exec"}
        values = dict(model_cfg)
        extra = sorted(set(values) - known)
        if extra:
            raise ConfigError(unknown("model key", extra[0], known))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _fields() -> list[tuple]:
    out, seen = [], set()
    for section in model_sections():
        for f in dataclasses.fields(section.keys):
            if f.name in seen:
                raise ValueError(f"model key {f.name!r} is declared twice; declare each key once")
            seen.add(f.name)
            out.append((f.name, f.type, dataclasses.field(default=f.default)))
    # How the MoE layers execute: set from the config's moe section and calibration, not a key.
    out.append(("moe_exec", MoEExec, dataclasses.field(default=MoEExec())))
    return out


# What the dataclass decorator generates on ModelConfig; removed before it runs again (it keeps
# methods a class defines itself).
_GENERATED = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__match_args__",
              "__dataclass_fields__", "__dataclass_params__")
_built_from: tuple = ()


def refresh_model_config() -> None:
    """Make :class:`ModelConfig` the frozen dataclass of the ``model`` sections registered now, in
    place, if they changed since it was last made (cheap otherwise). A ModelConfig built before a
    section arrived reads that section's defaults."""
    global _built_from
    sections = tuple(model_sections())
    if len(sections) == len(_built_from) and all(a is b for a, b in zip(sections, _built_from)):
        return
    fields = _fields()
    for name in (*_GENERATED, *getattr(ModelConfig, "__dataclass_fields__", ())):
        if name in ModelConfig.__dict__:
            delattr(ModelConfig, name)
    ModelConfig.__annotations__ = {name: kind for name, kind, _ in fields}
    for name, _, field in fields:
        setattr(ModelConfig, name, field)
    dataclasses.dataclass(frozen=True)(ModelConfig)
    _built_from = sections


refresh_model_config()
