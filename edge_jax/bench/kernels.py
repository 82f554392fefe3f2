"""``edge-jax bench kernels``: every registered Pallas kernel against its XLA reference, in one run.

A kernel registers ``cases(small: bool) -> list[KernelCase]`` in :data:`KERNEL_CASES` (the papers
register theirs at their own shapes). For each case the harness jits the kernel and the reference,
checks the kernel's output against the reference's (relative norm in float32, tolerance by
dtype), and, where the kernel compiles natively (TPU, GPU; :mod:`edge_jax.layers.kernels.backend`),
times both interleaved and prints the ratio and the kernel's achieved TFLOP/s and GB/s against the
device's peak. Where it would run interpreted (CPU) the cases are built ``small`` and only the
check is printed: an interpreted kernel's time says nothing about the kernel. There both variants of
our kernels are checked, the TPU one and (as wired in on a GPU, :func:`backend.emulating`) the GPU one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import statistics
from typing import Callable

import jax
import jax.numpy as jnp

from edge_jax.bench.catalog import KERNEL_CALLS
from edge_jax.compile.chips import CHIPS
from edge_jax.layers.kernels import backend
from edge_jax.registry import Registry
from edge_jax.train.flops import peak_flops
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.timing import samples_interleaved

TOL = {"float32": 1e-4, "bfloat16": 3e-2}
# device_kind -> memory bytes/s: the TPUs from compile.chips.CHIPS, the GPUs from NVIDIA's data sheets
# (read 2026-11); the peak FLOP/s come from edge_jax.train.flops.peak_flops, as training's MFU does
TPU_KINDS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5": "v5p", "TPU v6 lite": "v6e"}
BANDWIDTH = {"NVIDIA H100 80GB HBM3": 3.35e12, "NVIDIA H200": 4.8e12,
             **{kind: CHIPS[gen].hbm_bandwidth for kind, gen in TPU_KINDS.items()}}


@dataclasses.dataclass(frozen=True)
class KernelCase:
    """One row: ``kernel(*args)`` (the Pallas path, block sizes bound) against ``reference(*args)``
    (the XLA path); ``flops`` and ``bytes`` are what one call must compute and move at least (for
    the achieved rates)."""
    label: str
    kernel: Callable
    reference: Callable
    args: tuple
    flops: float
    bytes: float
    dtype: str = "bfloat16"


# kernel name (as in backend.NATIVE) -> cases(small: bool) -> list[KernelCase]
KERNEL_CASES: Registry[Callable[[bool], list]] = Registry("kernel benchmark")


def rel_error(got, want) -> float:
    """max over the output's leaves of |got - want| / |want| (Frobenius norms, float32)."""
    errs = [float(jnp.linalg.norm((g.astype(jnp.float32) - w.astype(jnp.float32)).ravel())
                  / max(float(jnp.linalg.norm(w.astype(jnp.float32).ravel())), 1e-30))
            for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))]
    return max(errs)


def queued(fn, args, calls: int):
    """A zero-arg callable that queues ``calls`` calls of ``fn(*args)`` and returns the last output (the
    device runs them back to back; only the last is waited for)."""
    def run():
        out = None
        for _ in range(calls):
            out = fn(*args)
        return out
    return run


def measure(case: KernelCase, name: str, repeats: int, variant: str | None = None, calls: int = KERNEL_CALLS) -> dict:
    """One row; ``variant`` (``gpu``: the GPU variant, interpreted) labels it. Each timed sample is
    ``calls`` queued calls: one call of a kernel under a millisecond would time mostly the dispatch
    and the wait. Fresh closures keep ``jax.jit`` from reusing another variant's trace of the same case."""
    kernel = jax.jit(lambda *a: case.kernel(*a))
    reference = jax.jit(lambda *a: case.reference(*a))
    err = rel_error(kernel(*case.args), reference(*case.args))
    row = {"kernel": name + (f" ({variant} variant)" if variant else ""), "case": case.label, "dtype": case.dtype,
           "rel_error": err, "tolerance": TOL[case.dtype], "ok": err <= TOL[case.dtype]}
    if backend.interpret(name):
        return row
    fns = {"kernel": queued(kernel, case.args, calls), "xla": queued(reference, case.args, calls)}
    samples = samples_interleaved(fns, repeats, calls)  # interleaved rounds: both see the same machine state
    t_k, t_r = samples["kernel"], samples["xla"]
    mk, mr = statistics.median(t_k), statistics.median(t_r)
    row.update(kernel_ms=1e3 * mk, kernel_spread_ms=1e3 * (max(t_k) - min(t_k)), xla_ms=1e3 * mr,
               xla_spread_ms=1e3 * (max(t_r) - min(t_r)), speedup=mr / mk, tflops=case.flops / mk / 1e12,
               gbps=case.bytes / mk / 1e9)
    kind = jax.devices()[0].device_kind
    flops_peak, bandwidth = peak_flops(kind), BANDWIDTH.get(kind)
    if flops_peak and bandwidth:
        row.update(flops_of_peak=case.flops / mk / flops_peak, bytes_of_peak=case.bytes / mk / bandwidth)
    return row


def format_rows(rows: list[dict]) -> str:
    device = jax.devices()[0].device_kind
    timed = any("kernel_ms" in r for r in rows)
    head = "| kernel | case | dtype | rel. error (tol) |" + (
        " XLA ms | Pallas ms | XLA/Pallas | TFLOP/s | GB/s | of peak (FLOP/s, B/s) |" if timed else "")
    lines = [f"Kernels on {device} ({backend.platform()}), jax {jax.__version__}", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["kernel"], r["case"], r["dtype"], f"{r['rel_error']:.1e} ({r['tolerance']:.0e})"
                 + ("" if r["ok"] else " FAIL")]
        if timed:
            if "kernel_ms" in r:
                peak = (f"{100 * r['flops_of_peak']:.0f}%, {100 * r['bytes_of_peak']:.0f}%"
                        if "flops_of_peak" in r else "unknown device")
                cells += [f"{r['xla_ms']:.3f} ± {r['xla_spread_ms'] / 2:.3f}",
                          f"{r['kernel_ms']:.3f} ± {r['kernel_spread_ms'] / 2:.3f}", f"{r['speedup']:.2f}x",
                          f"{r['tflops']:.1f}", f"{r['gbps']:.0f}", peak]
            else:
                cells += ["interpreted: not timed"] + [""] * 5
        lines.append("| " + " | ".join(cells) + " |")
    if not timed:
        lines += ["", f"No kernel compiles natively on {backend.platform()}: the kernels ran in the Pallas "
                  "interpreter at small shapes, so only their agreement with the XLA reference is shown."]
    else:
        lines += ["", "Times: per call, median ± half the spread (max - min) over the rounds (each a run of queued "
                  "calls), kernel and XLA interleaved."]
    return "\n".join(lines)


def run(args, overrides) -> str:
    for name in args.kernel or ():
        KERNEL_CASES.check(name, key="--kernel")
    small = not any(backend.native(name) for name in KERNEL_CASES.names())
    # interpreted (CPU): both variants of our kernels; on an accelerator: the platform's own
    variants = [None] + (["gpu"] if small and backend.TRITON else [])
    rows = []
    for name, cases in KERNEL_CASES.items():
        if args.kernel and name not in args.kernel:
            continue
        for case in cases(small or args.small):
            for variant in variants if name in backend.OURS else [None]:
                with backend.emulating(variant) if variant else contextlib.nullcontext():
                    rows.append(measure(case, name, args.repeats, variant, args.calls))
    if args.json:
        write_json_atomic(args.json, rows)
    report = format_rows(rows)
    if not all(r["ok"] for r in rows):
        report += "\n\nA kernel disagrees with its reference beyond the tolerance (FAIL above)."
    return report
