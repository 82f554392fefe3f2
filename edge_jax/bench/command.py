"""``edge-jax bench NAME``: benchmarks that time competing implementations in one run and print ratios."""
from __future__ import annotations

import argparse

BENCHMARKS = {
    "train-step": "edge_jax.bench.train_step",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("--config", default="configs/lm.py:size=tiny", help="path/to/config.py[:arg]")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (median reported)")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")


def run(args, overrides) -> int:
    import importlib
    module = importlib.import_module(BENCHMARKS[args.name])
    print(module.run(args, overrides))
    return 0
