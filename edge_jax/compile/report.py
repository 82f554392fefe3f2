"""What a compile says, as a roofline estimate and as the table ``edge-jax compile`` prints.

The estimate is a roofline, not a measurement: a step takes at least its compiled FLOPs over the
chip's peak bf16 FLOP/s and at least its compiled HBM traffic over the chip's HBM bandwidth; the
larger of the two is the estimate. Collectives over ICI/DCN, imperfect overlap and kernel
efficiency are left out, so real steps are slower (MaxText's reported MFUs of 40-60 % on these
chips are the gap to expect). MFU = model FLOPs (6 N T + attention, :func:`model_flops`) over
devices x peak x estimated step time.

The FLOPs and bytes are the compiler's, with the loop bodies it counts once (the layer scan, the
loss chunks, the micro-batches) compiled alone and counted their missing times
(:mod:`edge_jax.compile.loops`), so remat recompute and whatever else the compiler adds to the
model's FLOPs make the step longer and show as MFU below 100 %.
"""
from __future__ import annotations

import dataclasses

from edge_jax.compile.aot import CompileStats
from edge_jax.compile.chips import GiB, Target
from edge_jax.compile.fit import OutOfMemory


@dataclasses.dataclass
class Estimate:
    step_s: float
    compute_s: float
    memory_s: float
    tokens_per_s: float
    mfu: float | None           # None: no compiled FLOP count to measure the model's against


def estimate(stats: CompileStats, target: Target) -> Estimate | None:
    """The roofline step time and what follows from it; None without a chip (CPU, local). Without a
    compiled count (XLA's GPU compiler gives none) the roofline is on the model's FLOPs and on the
    step's arguments and outputs moved once: a lower bound on the step, with no MFU to show."""
    chip = target.chip
    if chip is None:
        return None
    counted = stats.flops > 0
    flops = stats.flops if counted else stats.model_flops / len(target.devices)
    traffic = stats.bytes_accessed if counted else stats.argument_bytes + stats.output_bytes
    compute, memory = flops / chip.peak_flops, traffic / chip.hbm_bandwidth
    step = max(compute, memory, 1e-12)
    mfu = stats.model_flops / (len(target.devices) * chip.peak_flops * step) if counted else None
    return Estimate(step, compute, memory, stats.tokens / step, mfu)


def gib(n: float) -> str:
    """Bytes in GiB (MiB below one GiB)."""
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 2 ** 20:.1f} MiB"


def duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.3g} s"


def mesh_text(mesh: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in mesh.items())


def describe(stats: CompileStats, target: Target, budget_tokens: float = 0.0) -> list[tuple[str, str]]:
    """``(quantity, value)`` rows for one compiled step."""
    hbm = target.chip.hbm_bytes if target.chip else None
    rows = [("target", f"{target.name} ({len(target.devices)} devices)"), ("mesh", mesh_text(stats.mesh)),
            ("step", f"{stats.step}: batch {stats.batch} x {stats.seq}"
                     + (f", grad_accum {stats.grad_accum}" if stats.grad_accum > 1 else "") + f", remat {stats.remat}"),
            ("params / device", gib(stats.param_bytes)),
            ("params + optimizer / device", gib(stats.state_bytes)),
            ("arguments / device (compiler)", gib(stats.argument_bytes)),
            ("temporaries / device (compiler)", gib(stats.temp_bytes)),
            ("total / device", gib(stats.total_bytes) + (f" of {gib(hbm)} HBM" if hbm else "")),
            ("fits", "n/a (no chip HBM)" if hbm is None else ("yes" if stats.total_bytes <= hbm else
                                                             f"no: {gib(stats.total_bytes - hbm)} over")),
            ("compiled FLOPs / device / step", f"{stats.flops:.3e}" + (
                f" ({stats.loop_flops:.3e} of them: loop bodies the compiler counts once, compiled alone)"
                if stats.loop_flops else "") if stats.flops else "n/a (the compiler gives no cost analysis)"),
            ("model FLOPs / device / step", f"{stats.model_flops / len(target.devices):.3e} (6 N T + attention)"),
            ("compile time", f"{stats.compile_s:.1f} s")]
    est = estimate(stats, target)
    if est is not None:
        bound = "compute" if est.compute_s >= est.memory_s else "HBM bandwidth"
        basis = "" if est.mfu is not None else ", on model FLOPs: a lower bound"
        rows += [("est. step time (roofline)", f"{est.step_s * 1e3:.1f} ms ({bound}-bound{basis})"),
                 ("est. tokens/s", f"{est.tokens_per_s:,.0f}" + (" (an upper bound)" if basis else "")),
                 ("est. MFU", f"{100 * est.mfu:.1f} %" if est.mfu is not None else "n/a (no compiled FLOPs)")]
        if budget_tokens:
            rows.append((f"est. time for {budget_tokens:.3g} tokens", duration(budget_tokens / est.tokens_per_s)))
    return rows


def oom_rows(oom: OutOfMemory, target: Target) -> list[tuple[str, str]]:
    said = (f"needs {gib(oom.needed)} of {gib(oom.available)} per device: {gib(oom.short_by)} over"
            if oom.needed else oom.message.splitlines()[0][:200])
    return [("target", f"{target.name} ({len(target.devices)} devices)"), ("fits", f"no: {said}")]


def fix_row(flag: str | None, stats: CompileStats | None, target: Target) -> tuple[str, str]:
    """The cheapest fix the compiler confirmed, with what the step then holds and takes."""
    if flag is None:
        return ("cheapest fix the compiler confirms", "none of the candidates fit (see docs/compile.md)")
    est = estimate(stats, target)
    then = f"{gib(stats.total_bytes)} / device" + (f", est. step {est.step_s * 1e3:.1f} ms" if est else "")
    return ("cheapest fix the compiler confirms", f"{flag} (then {then})")


def table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


KERNELS_NOTE = ("model.kernels is not xla: the compiler's cost analysis does not see inside Pallas (Mosaic) calls, "
                "so FLOPs, bytes and the estimates leave them out; memory figures are whole.")
NOTE = ("Estimates are a roofline (compiled FLOPs / peak bf16 FLOP/s vs compiled HBM bytes / HBM bandwidth, "
        "the larger, loop bodies counted every time), without collectives or overlap: real steps are slower. "
        "MFU = model FLOPs (6 N T + attention) / (devices x peak x est. step): remat recompute and the "
        "compiler's other additions show as the gap to 100 %.")
GPU_NOTE = ("On a GPU card XLA's compiler gives no FLOP or byte count: the estimate is a roofline on the "
            "model's FLOPs and on the step's arguments and outputs moved once, a lower bound on the step time "
            "(tokens/s an upper bound), and there is no MFU to show. HBM is the card's memory.total; JAX "
            "preallocates 75 % of it unless XLA_PYTHON_CLIENT_MEM_FRACTION is raised (docs/compile.md).")
