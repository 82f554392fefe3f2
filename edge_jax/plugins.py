"""The one bootstrap of the registries (:mod:`edge_jax.registry`): which modules register what, imported on request.

A registry fills as the modules that register into it are imported; reading one imports nothing. Two
calls fill them, each once per process:

- :func:`load_cli`: what the command line lists and parses, without JAX: the core benchmarks
  (:mod:`edge_jax.bench.catalog`), then each paper's ``cli.py`` (its commands and benchmarks in
  :data:`edge_jax.registry.COMMANDS` and :data:`edge_jax.registry.BENCHMARKS`, whose runs are imported
  when they run). ``edge-jax --help`` and argument errors need no more.
- :func:`load`: everything: :func:`load_cli`, then :data:`CORE` (the layers through the model, the
  generic KV baselines, the LM runner and its evaluators, the zero-shot tasks and evaluator), then each
  paper's ``plugin.py``, which imports the paper's modules that register (config sections, evaluators,
  hooks, KV methods, kernel cases ...).

The CLI calls :func:`load` after parsing, before it runs a command (``edge-jax launch`` and ``summary``
need none); the library's entry points that read the registries call it too
(:func:`edge_jax.config.load_config`, :func:`~edge_jax.config.base_config`,
:func:`~edge_jax.config.upgrade_config`), and so does ``tests/conftest.py``. The papers are
:data:`edge_jax.papers.PAPERS`, so a sixth paper is one folder under ``edge_jax/papers/`` (with its
``cli.py`` and ``plugin.py``) plus one name there. The generic code never imports a paper: the names
below are held in variables.
"""
from __future__ import annotations

import importlib
import threading

# The core modules whose import registers variants (after the CLI's declarations, before the papers).
CORE = ("edge_jax.models", "edge_jax.infer", "edge_jax.train.loop", "edge_jax.eval.evaluator")
CLI = "edge_jax.bench.catalog"  # the core benchmarks (the core commands are edge_jax.cli's own)
PAPERS = "edge_jax.papers"      # its PAPERS: the paper packages, in registration order

_done: set[str] = set()
_active = threading.local()


def _papers() -> tuple[str, ...]:
    return tuple(f"{PAPERS}.{name}" for name in importlib.import_module(PAPERS).PAPERS)


def _run(phase: str, modules) -> None:
    """Import ``modules()`` once per process (re-entrant: a registry read while they import sees what
    has registered so far)."""
    if phase in _done or getattr(_active, phase, False):
        return
    setattr(_active, phase, True)
    try:
        for name in modules():
            importlib.import_module(name)
        _done.add(phase)
    finally:
        setattr(_active, phase, False)


def load_cli() -> None:
    """Register what the command line offers (commands, benchmarks and their flags); imports no JAX."""
    _run("cli", lambda: (CLI, *(f"{paper}.cli" for paper in _papers())))


def load() -> None:
    """Register every variant: :func:`load_cli`, the core's modules, then every paper's."""
    load_cli()
    _run("all", lambda: (*CORE, *(f"{paper}.plugin" for paper in _papers())))


def loaded() -> bool:
    """Whether :func:`load` has run in this process (a registry's unknown-name error says when not)."""
    return "all" in _done
