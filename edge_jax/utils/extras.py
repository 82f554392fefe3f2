"""Optional dependencies: the extra of ``pyproject.toml`` that installs each, whether one is installed,
and a one-line refusal where a feature needs one that is missing.

A plain ``pip install -e .`` runs every command on a CPU; the extras add what some features need
(README, "Installing"). A module imports an extra's package only inside the feature that uses it, so
that every module imports, and every feature that does not need the package runs, without it; the
feature first calls :func:`require`::

    require("safetensors", f"reading the checkpoint {path}")
    from safetensors import safe_open

Without safetensors that raises :class:`MissingExtra`, which the CLI prints as one line::

    edge-jax: error: reading the checkpoint ckpt/ needs the interop extra (safetensors is not installed):
    pip install -e '.[interop]'

``tests/utils/test_extras.py`` imports every module of ``edge_jax`` with each extra's packages hidden and
runs the features that need them.
"""
from __future__ import annotations

import importlib.util

from edge_jax.errors import UserError

# Top-level import name -> the extra that installs it (pyproject.toml's [project.optional-dependencies]).
PACKAGES = {
    "torch": "interop", "transformers": "interop", "safetensors": "interop",
    "lm_eval": "lm-eval", "accelerate": "lm-eval",
    "libtpu": "tpu",
    "jax_plugins": "cuda", "jax_cuda12_plugin": "cuda",
    "gcsfs": "gcs",
}


class MissingExtra(UserError):
    """A feature was used without the extra that installs a package it needs."""

    def __init__(self, feature: str, package: str):
        self.feature, self.package, self.extra = feature, package, PACKAGES[package.partition(".")[0]]
        super().__init__(f"{feature} needs the {self.extra} extra ({package} is not installed): "
                         f"pip install -e '.[{self.extra}]'")


def installed(module: str) -> bool:
    """Whether ``module`` (a dotted name) can be imported, answered without importing it: only its parent
    packages are imported. A missing parent is False, not the ``ModuleNotFoundError`` that
    ``importlib.util.find_spec("a.b")`` raises when ``a`` is missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing or hidden; ValueError: a module without a spec
        return False


def require(module: str, feature: str) -> None:
    """Refuse ``feature`` (:class:`MissingExtra`) unless ``module`` is installed; ``module``'s top-level
    name is one of :data:`PACKAGES`."""
    if not installed(module):
        raise MissingExtra(feature, module)
