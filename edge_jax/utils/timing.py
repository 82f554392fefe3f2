"""Interleaved timing of several jitted callables, so they see the same machine state."""
from __future__ import annotations

import statistics
import time

import jax


def samples_interleaved(fns: dict, repeats: int, steps: int) -> dict:
    """``fns``: name -> zero-arg callable running ``steps`` iterations and returning arrays to block on.

    Each callable runs once to compile; then the rounds alternate between them. Returns every
    round's seconds per iteration for each.
    """
    for fn in fns.values():
        jax.block_until_ready(fn())
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            samples[name].append((time.perf_counter() - t0) / steps)
    return samples


def time_interleaved(fns: dict, repeats: int, steps: int) -> dict:
    """The median seconds per iteration of each of :func:`samples_interleaved`'s callables."""
    return {name: statistics.median(s) for name, s in samples_interleaved(fns, repeats, steps).items()}
