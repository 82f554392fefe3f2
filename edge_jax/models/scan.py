"""The layer stack as one scanned block (``model.scan_layers``) and rematerialisation (``model.remat``).

An unrolled Python loop over ``n_layers`` blocks makes XLA compile every layer separately; with
``scan_layers`` the decoder runs :func:`flax.linen.scan` over a single block, so it compiles once and
its params carry a leading layer axis: ``layers/attn/q_proj/kernel [L, D, H, K]`` instead of
``layers_0/...`` ... ``layers_{L-1}/...``. :func:`stack_layers` and :func:`unstack_layers` convert
between the two trees exactly (HF import, ``init_from``, checkpoints of the other layout, analyses
that read one layer's params).

Scanning needs every layer to build the same modules; :func:`scan_blocker` names what makes a
config's layers differ (a memory kind's ``scan_blocker``, e.g. a memory in some layers only; MoE in
some layers only; per-layer MoE plans that differ).

``remat`` recomputes a block's activations in the backward pass instead of keeping them:
:data:`REMAT_POLICIES` maps each value to the :mod:`jax.checkpoint_policies` policy of what is saved.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.errors import ConfigError
from edge_jax.layers.token_memory.base import MEMORY_KINDS

STACKED = "layers"  # the scanned block's name: params live under layers/... with a leading layer axis
_LAYER = re.compile(r"layers_(\d+)")

# model.remat -> what the backward pass keeps of a block (None under "none": no remat at all).
REMAT_POLICIES = {
    "none": None,  # keep every activation (fastest, most memory)
    "full": jax.checkpoint_policies.nothing_saveable,  # keep only the block inputs; recompute the rest
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,  # keep matmul outputs, recompute the rest
}


def check_remat(value: str) -> None:
    """One-line ConfigError for a ``model.remat`` value outside :data:`REMAT_POLICIES`."""
    if value not in REMAT_POLICIES:
        raise ConfigError(f"unknown model.remat value {value!r}; valid: {', '.join(REMAT_POLICIES)}")


def scan_blocker(cfg) -> str | None:
    """Why the layers of ``cfg`` (a ModelConfig or a ``config.model`` ConfigDict) differ, so the
    stack cannot be one scanned block; None when every layer builds the same modules."""
    every = set(range(cfg.n_layers))
    memory_blocker = MEMORY_KINDS.get(cfg.memory).scan_blocker
    reason = memory_blocker(cfg) if memory_blocker is not None else None
    if reason:
        return reason
    if cfg.moe_experts > 0 and cfg.moe_layers and set(cfg.moe_layers) != every:
        return f"model.moe_layers={list(cfg.moe_layers)} makes only those layers MoE"
    moe_exec = getattr(cfg, "moe_exec", None)
    if moe_exec is not None and len(set(moe_exec.plans)) > 1:
        return "the calibrated MoE capacity plans differ between layers"
    return None


def check_scan(cfg) -> None:
    """One-line ConfigError when ``model.scan_layers`` is set on a model whose layers differ."""
    reason = cfg.scan_layers and scan_blocker(cfg)
    if reason:
        raise ConfigError(f"model.scan_layers needs identical layers; {reason}; set model.scan_layers=False")


def _layer_names(tree: Mapping) -> dict[int, str]:
    return {int(m.group(1)): k for k in tree if isinstance(k, str) and (m := _LAYER.fullmatch(k))}


def _stack(leaves):
    if all(isinstance(x, np.ndarray) for x in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def _stack_mapping(tree: Mapping, n_layers: int | None) -> dict:
    names = _layer_names(tree)
    if not names:
        return dict(tree)
    n = len(names) if n_layers is None else n_layers
    if sorted(names) != list(range(n)):
        raise ValueError(f"stack_layers expects layers_0 .. layers_{n - 1}; found {sorted(names)}")
    if STACKED in tree:
        raise ValueError("this tree holds both layers_i and a stacked 'layers'; convert one layout only")
    layers = [tree[names[i]] for i in range(n)]
    stacked = jax.tree_util.tree_map(lambda *xs: _stack(xs), *layers)
    rest = {k: v for k, v in tree.items() if k not in names.values()}
    return {**rest, STACKED: stacked}


def _unstack_mapping(tree: Mapping) -> dict:
    if STACKED not in tree:
        return dict(tree)
    stacked = tree[STACKED]
    n = {x.shape[0] for x in jax.tree_util.tree_leaves(stacked)}
    if len(n) != 1:
        raise ValueError(f"the stacked layers' leading axes differ ({sorted(n)}); not a scanned layer stack")
    (n,) = n
    rest = {k: v for k, v in tree.items() if k != STACKED}
    return {**rest, **{f"layers_{i}": jax.tree_util.tree_map(lambda x, i=i: x[i], stacked) for i in range(n)}}


def _walk(tree, convert):
    """Apply ``convert`` to every mapping of a nested tree of dicts, tuples, lists and NamedTuples
    (param trees, ``{"params": ...}`` variables, optax states), leaves untouched."""
    if isinstance(tree, Mapping):
        return {k: _walk(v, convert) for k, v in convert(tree).items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_walk(v, convert) for v in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_walk(v, convert) for v in tree)
    return tree


def stack_layers(params, n_layers: int | None = None):
    """``layers_0/...`` .. ``layers_{L-1}/...`` -> ``layers/...`` with a leading axis of size L,
    wherever a mapping in ``params`` holds per-layer subtrees (plain arrays, not boxed ones).
    ``n_layers`` (optional) checks that exactly that many layers are present."""
    return _walk(params, lambda t: _stack_mapping(t, n_layers))


def unstack_layers(params):
    """The inverse of :func:`stack_layers`: ``layers/...`` [L, ...] -> ``layers_i/...``."""
    return _walk(params, _unstack_mapping)


def is_stacked(params) -> bool:
    """Whether a param tree (or ``{"params": ...}``) holds the scanned layout."""
    params = params.get("params", params) if isinstance(params, Mapping) else params
    return isinstance(params, Mapping) and STACKED in params


def like_layout(params, reference):
    """``params`` in the layer layout of ``reference`` (stacked or per layer); unchanged if they agree."""
    if is_stacked(reference) and not is_stacked(params):
        return stack_layers(params)
    if is_stacked(params) and not is_stacked(reference):
        return unstack_layers(params)
    return params
