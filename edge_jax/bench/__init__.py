"""Benchmarks that time competing implementations in one run and print ratios (``edge-jax bench NAME``).

A benchmark is declared as a :class:`Benchmark` in :data:`edge_jax.registry.BENCHMARKS`, in a module that
imports no JAX (the core's in :mod:`edge_jax.bench.catalog`, each paper's in its ``cli.py``), so that
``edge-jax bench --help`` lists every one at once; what it measures lives in its own module (e.g.
``edge_jax.bench.train_step``), imported only when it runs. :mod:`edge_jax.bench.command` is the harness
that parses the flags and runs the chosen one.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One ``edge-jax bench NAME`` (NAME: its key in :data:`edge_jax.registry.BENCHMARKS`).

    ``run`` names the function that measures, ``"module:function"`` (e.g.
    ``"edge_jax.bench.train_step:run"``): ``function(args, overrides) -> str`` returns the report to print
    (``overrides``: the ``--config.*`` flags); its module is imported when the benchmark runs
    (:meth:`__call__`). ``help`` describes it; ``edge-jax bench --help`` shows it over the benchmark's own
    flags, which ``add_arguments(group)`` adds to that argument group (declared beside this declaration,
    so light too). The flags several benchmarks read (``--repeats``, ``--chunk``, ``--json``, the model and
    MoE shape) belong to the harness, which declares them in :func:`edge_jax.bench.command.add_arguments`;
    ``defaults`` sets ``--repeats`` and ``--chunk`` (the only shared flags a benchmark may default) when
    they are not given (e.g. ``{"repeats": 1}``; else :data:`edge_jax.bench.command.DEFAULTS`).
    ``writes_json``: whether ``run`` writes its measurements to ``--json``; the harness then keeps them as the
    file's ``result``, beside the printed ``report`` and the ``provenance`` (command, commit, machine, date)
    that every benchmark's ``--json`` holds (:func:`edge_jax.bench.command.write_result`)."""
    help: str
    run: str
    add_arguments: Callable[[Any], None] | None = None
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    writes_json: bool = False

    def __post_init__(self):
        module, colon, function = self.run.partition(":")
        if not colon or not module.startswith("edge_jax.") or not function.isidentifier():
            raise ValueError(f"Benchmark run {self.run!r}: write 'module:function', "
                             "e.g. 'edge_jax.bench.train_step:run'")

    def __call__(self, args, overrides) -> str:
        """Import the measuring module and run it: the report to print."""
        module, _, function = self.run.partition(":")
        return getattr(importlib.import_module(module), function)(args, overrides)
