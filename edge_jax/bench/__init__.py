"""Benchmarks that time competing implementations in one run and print ratios (``edge-jax bench NAME``).

A benchmark registers a :class:`Benchmark` under its name in :data:`edge_jax.registry.BENCHMARKS`,
in the module that defines it (``edge_jax.bench.train_step`` here, each paper's ``bench.py``);
:mod:`edge_jax.bench.command` is the harness that parses the flags and runs the chosen one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One ``edge-jax bench NAME`` (NAME: its key in :data:`edge_jax.registry.BENCHMARKS`).

    ``run(args, overrides) -> str`` measures and returns the report to print (``overrides``: the
    ``--config.*`` flags). ``help`` describes it; ``edge-jax bench --help`` shows it over the
    benchmark's own flags, which ``add_arguments(group)`` adds to that argument group. The flags
    several benchmarks read (``--repeats``, ``--chunk``, ``--json``, the model and MoE shape) belong to
    the harness, which declares them in :func:`edge_jax.bench.command.add_arguments`; ``defaults`` sets
    ``--repeats`` and ``--chunk`` (the only shared flags a benchmark may default) when they are not given
    (e.g. ``{"repeats": 1}``; else :data:`edge_jax.bench.command.DEFAULTS`). ``writes_json``: whether ``run`` writes its
    measurements to ``--json`` (the harness refuses ``--json`` for a benchmark that would ignore it)."""
    help: str
    run: Callable[[Any, list], str]
    add_arguments: Callable[[Any], None] | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    writes_json: bool = False
