"""``edge-jax bench NAME``: the harness of the benchmarks in :data:`edge_jax.registry.BENCHMARKS`.

It declares the flags several benchmarks read (``--repeats``, ``--chunk``, ``--json``, the model and MoE
shape), then one argument group per benchmark with the flags only it reads
(:class:`edge_jax.bench.Benchmark`). A shared flag left out takes the chosen benchmark's default
(``Benchmark.defaults``), else :data:`DEFAULTS`; the benchmark's report is printed. The benchmarks are
those the bootstrap declared (:func:`edge_jax.plugins.load_cli`: :mod:`edge_jax.bench.catalog` and each
paper's ``cli.py``); building the parser imports none of their measuring modules.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

from edge_jax.layers.kernels import KERNEL_MODES
from edge_jax.registry import BENCHMARKS
from edge_jax.utils.args import count, output_file
from edge_jax.utils.atomic import write_json_atomic

DEFAULTS = {"repeats": 5}  # shared flags given neither on the command line nor by the benchmark


def _defaults_help(key: str, fallback: object | None = None) -> str:
    """``default 5, long-context 1``: the harness's default for ``key`` and each benchmark's own, by name (the
    registration order depends on which module a process imported first)."""
    parts = [] if fallback is None else [str(fallback)]
    parts += [f"{name} {bench.defaults[key]}" for name, bench in sorted(BENCHMARKS.items()) if key in bench.defaults]
    return ("default " if fallback is not None else "default: ") + ", ".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    benchmarks = BENCHMARKS.items()
    parser.add_argument("name", choices=sorted(name for name, _ in benchmarks), help="which benchmark")
    per_benchmark = [  # shared flags whose default the benchmark may set (Benchmark.defaults)
        parser.add_argument("--repeats", type=count, default=None, help="timed rounds (median reported; "
                            f"{_defaults_help('repeats', DEFAULTS['repeats'])})"),
        parser.add_argument("--chunk", type=count, default=None, help=f"tokens per prefill chunk "
                            f"({_defaults_help('chunk')})")]
    parser.add_argument("--json", default=None, help="write the report, the measurements (the benchmarks that "
                        "measure into JSON) and the provenance (command, commit, machine, date) as JSON here")
    g = parser.add_argument_group("model shape", "size flags of the benchmarks that build a model or a layer; "
                                  "each benchmark's group gives the flags it reads and its default shape")
    g.add_argument("--preset", default=None, help="a size from edge_jax.models.presets.MODEL_SIZES, e.g. qwen3_0p6b")
    for flag, help_ in (("--d-model", "model width"), ("--layers", "number of layers"), ("--heads", "query heads"),
                        ("--kv-heads", "key/value heads"), ("--head-dim", "head width"), ("--d-ff", "FFN width"),
                        ("--vocab", "vocabulary size")):
        g.add_argument(flag, type=count, default=None, help=help_)
    g.add_argument("--batch", type=count, default=1, help="sequences decoded together")
    g.add_argument("--kernels", default="xla", choices=KERNEL_MODES,
                   help="model.kernels of the benchmarks that build a layer or model: xla, pallas or auto "
                        "(docs/kernels.md)")
    g.add_argument("--dtype", default="float32", help="compute and parameter dtype (float32, bfloat16, float16)")
    g.add_argument("--experts", type=count, default=16, help="routed experts")
    g.add_argument("--top-k", type=count, default=2, help="experts per token")
    settable = {action.dest for action in per_benchmark}
    for name, bench in benchmarks:
        if set(bench.defaults) - settable:
            raise ValueError(f"benchmark {name!r} sets defaults for {sorted(set(bench.defaults) - settable)}; "
                             f"a benchmark may set only {sorted(settable)} (its own flags take their defaults)")
        if bench.add_arguments is not None:
            bench.add_arguments(parser.add_argument_group(name, bench.help))


def run(args: argparse.Namespace, overrides) -> int:
    bench = BENCHMARKS.get(args.name)
    if args.json:
        output_file(args.json, "--json")
    for key, value in {**DEFAULTS, **bench.defaults}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    origin = provenance() if args.json else None  # the tree as the benchmark starts, not as it ends
    report = bench(args, overrides)
    print(report)
    if args.json:
        write_result(args.json, report, measured=bench.writes_json, origin=origin)
    return 0


def write_result(path: str, report, measured: bool, origin: dict | None = None) -> None:
    """``--json``: what the benchmark measured (``result``: the JSON a benchmark that ``writes_json`` wrote
    there, else absent), the report it printed, and where it came from (``provenance``: the command, the
    commit, the machine, the date), so that a number quoted in the docs has its file (process 0 writes)."""
    from edge_jax import distributed
    if not distributed.is_lead():
        return
    out = {"report": str(report), "provenance": origin or provenance()}
    if measured and Path(path).is_file():
        out = {"result": json.loads(Path(path).read_text()), **out}
    write_json_atomic(path, out)


def provenance() -> dict:
    """The command, git commit, devices, host, library versions and UTC date of this run."""
    from edge_jax.utils import provenance as p
    return {"command": p.command_line(), "git": p.git_info(Path.cwd()), "device": p.device_info(),
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "processor": platform.processor(),
                     "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
            "versions": p.versions(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
