"""``edge-jax bench kernels`` cases of the grouped capacity expert FFN (``expert_ffn``) at NPUMoE's shapes.

Full size: PhiMoE's experts (d_model 4096, expert d_ff 6400, 16 experts top-2; NPUMoE's main model),
bfloat16, one static group per case. A prefill chunk of 512 tokens gives the base capacity
``512 * 2 / 16 = 64`` rows (§4.1); the tiers are 0.5x/1x/2x/4x base, so the cases take the 64, 128
and 256-row tiers in groups of 4 experts and the 64-row tier in a group of 8 (Table 5's group sizes).
The experts are partially filled, 65% of the rows on average (the paper measured 35.35% padding):
fills 100/80/60/20% of the capacity, and one case with an empty expert (100/90/70/0%).

Small (the CPU interpreter): three experts of d 128, d_ff 256, 32 rows, float32 and bfloat16, with
an empty, a partial and a full expert, blocks of 16 rows and 128 columns (12 grid steps).

``flops = 2 * 3 * valid rows * D * F``; ``bytes``: what the kernel reads and writes with its block
sizes: the weights of each live row tile's expert (an empty expert's are never fetched), the
live tiles' rows, and the whole output.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.bench.kernels import KERNEL_CASES, KernelCase
from edge_jax.layers.kernels.expert_ffn import block_sizes, expert_ffn, expert_ffn_reference

PHIMOE = dict(d=4096, d_ff=6400, experts=16, top_k=2, chunk=512)
FILLS = {"65% filled": (1.0, 0.8, 0.6, 0.2), "one empty": (1.0, 0.9, 0.7, 0.0)}


def counts(capacity: int, group: int, fills) -> np.ndarray:
    """Valid rows per expert: the fill fractions of the capacity, repeated over the group."""
    return np.array([round(capacity * fills[i % len(fills)]) for i in range(group)], np.int32)


def case(label: str, X: int, Z: int, D: int, F: int, count_X, dtype: str, seed: int = 0, **blocks) -> KernelCase:
    """One group of ``X`` random experts (scale 1/sqrt(fan-in)) on random rows, ``count_X`` valid."""
    dt = jnp.dtype(dtype)
    k = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(k[0], (X, Z, D), dt)
    gate, up = (jax.random.normal(kk, (X, D, F), dt) / np.sqrt(D).astype(dt) for kk in k[1:3])
    down = jax.random.normal(k[3], (X, F, D), dt) / np.sqrt(F).astype(dt)
    count = np.asarray(count_X, np.int32)
    bc, _, _ = block_sizes(Z, F, dt, blocks.get("block_c"), blocks.get("block_f"), blocks.get("block_r"))
    live = -(-count // bc)  # row tiles with a valid row, per expert
    size = dt.itemsize
    traffic = int(live.sum()) * (3 * D * F + bc * D) * size + X * Z * D * size
    return KernelCase(label, functools.partial(expert_ffn, **blocks), expert_ffn_reference,
                      (x, gate, up, down, jnp.asarray(count)), flops=2 * 3 * float(count.sum()) * D * F,
                      bytes=float(traffic), dtype=dtype)


def cases(small: bool) -> list[KernelCase]:
    # the labels keep their "G" (experts) and "C" (capacity): the committed bench results name the cases so
    if small:
        count = [0, 20, 32]
        return [case(f"G 3 x C 32, d 128, d_ff 256, rows {count}", 3, 32, 128, 256, count, dtype,
                     block_c=16, block_f=128, block_r=8 if dtype == "float32" else 16)
                for dtype in ("float32", "bfloat16")]
    p = PHIMOE
    base = p["chunk"] * p["top_k"] // p["experts"]
    out = []
    for X, tier, fills in ((4, 1, "65% filled"), (4, 2, "65% filled"), (4, 4, "65% filled"), (8, 1, "65% filled"),
                           (4, 2, "one empty")):
        Z = tier * base
        count = counts(Z, X, FILLS[fills])
        out.append(case(f"PhiMoE G {X} x C {Z} ({tier}x base), {fills}", X, Z, p["d"], p["d_ff"], count, "bfloat16"))
    return out


KERNEL_CASES.register("expert_ffn", cases)
