"""Whether a step fits a device, by how much it does not, and the cheapest change the compiler
confirms makes it fit.

A TPU compile that needs more HBM than the chip has fails in the compiler (RESOURCE_EXHAUSTED);
:func:`compile_or_oom` turns that into an :class:`OutOfMemory` with the bytes asked for and
available. :func:`cheapest_fix` then compiles candidate changes, cheapest first (the loss a chunk
of positions at a time, rematerialise matmul outputs only, rematerialise everything, shard
parameters over every device, halve the micro-batch with gradient accumulation), then the smallest
accumulation dividing the batch at which the last compile's temporaries would fit (a one-card GPU
target needs far more than 8), and names the first one that compiles and fits.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable

import ml_collections

from edge_jax.compile.aot import CompileStats
from edge_jax.compile.chips import Target
from edge_jax.config import apply_overrides
from edge_jax.errors import UserError

LOSS_CHUNK = 512  # positions of logits at a time when the loss is chunked (a 151,680 vocabulary: 0.3 GB)
_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


@dataclasses.dataclass
class OutOfMemory:
    """The compiler's refusal: bytes needed and available per device (0 where it did not say)."""
    needed: float
    available: float
    message: str

    @property
    def short_by(self) -> float:
        return max(self.needed - self.available, 0.0)


def _bytes(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)\s*([KMGT]?)i?B?", text.strip()).groups()
    return float(number) * _UNITS[unit]


def parse_oom(message: str) -> OutOfMemory | None:
    """The needed / available bytes of an XLA out-of-memory error, None if ``message`` is not one. A
    GPU kernel that would need more thread blocks than the card launches (a whole global batch as one
    program on one card) is a step too large for the device too, with no byte counts."""
    if "than allowed by hardware" in message:
        m = re.search(r"Kernel '([^']+)' launch needs more blocks[^\n]*", message)
        return OutOfMemory(0.0, 0.0, m.group(0) if m else message)
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    size = r"([\d.]+\s*[KMGT]?i?B?)"
    m = re.search(rf"\({size}\) exceeds available HBM \({size}\)", message)
    if m:
        return OutOfMemory(_bytes(m.group(1)), _bytes(m.group(2)), message)
    m = re.search(rf"Used {size} of {size} hbm", message)
    if m:
        return OutOfMemory(_bytes(m.group(1)), _bytes(m.group(2)), message)
    return OutOfMemory(0.0, 0.0, message)


def compile_or_oom(compile_fn: Callable[[], CompileStats]) -> CompileStats | OutOfMemory:
    try:
        return compile_fn()
    except Exception as e:  # the compiler's errors arrive as JaxRuntimeError / XlaRuntimeError
        oom = parse_oom(str(e))
        if oom is None:
            raise
        return oom


def fits(result: CompileStats | OutOfMemory, target: Target) -> bool:
    if isinstance(result, OutOfMemory):
        return False
    return target.chip is None or result.total_bytes <= target.chip.hbm_bytes


def candidate_fixes(config: ml_collections.ConfigDict, n_devices: int) -> list[tuple[str, dict]]:
    """``(what to pass, overrides)`` cheapest first, each applied on top of ``config``."""
    out = []
    seq = int(config.data.seq_len)
    if not int(config.train.get("loss_chunk", 0)) and seq > LOSS_CHUNK and seq % LOSS_CHUNK == 0:
        out.append((f"--config.train.loss_chunk={LOSS_CHUNK}", {"train.loss_chunk": LOSS_CHUNK}))
    remat = config.model.get("remat", None)
    if remat is not None:
        if remat == "none":
            out.append(("--config.model.remat=dots", {"model.remat": "dots"}))
        if remat != "full":
            out.append(("--config.model.remat=full", {"model.remat": "full"}))
    m = config.mesh
    if int(m.fsdp) not in (-1, n_devices // max(int(m.tensor), 1)) or int(m.data) not in (1, -1):
        out.append(("--mesh data=1,fsdp=-1", {"mesh.data": 1, "mesh.fsdp": -1}))
    accum, batch = int(config.train.grad_accum), int(config.data.batch_size)
    for k in (2, 4, 8):
        if batch % (accum * k) == 0:
            out.append((f"--config.train.grad_accum={accum * k}", {"train.grad_accum": accum * k}))
    return out


def with_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
    """A copy of ``config`` with ``overrides`` applied (``config`` is left as it is)."""
    return apply_overrides(ml_collections.ConfigDict(config.to_dict()), overrides)


def cheapest_fix(config, target: Target, compile_for: Callable, max_tries: int = 5):
    """``(flag, stats)`` of the first candidate (and the ones before it combined) that fits, or
    ``(None, None)`` after ``max_tries`` compiles. Fixes accumulate: the chunked loss, remat, then
    sharding, then accumulation, so the one named includes those before it."""
    applied: dict = {}
    flags: list[str] = []
    last = None
    for flag, overrides in candidate_fixes(config, len(target.devices))[:max_tries]:
        kind = next(iter(overrides)).split(".")[-1]  # a later remat / grad_accum replaces the earlier one
        trial = {**applied, **overrides}
        try:
            result = compile_or_oom(lambda: compile_for(with_overrides(config, trial)))
        except UserError:  # not buildable on this mesh (e.g. a micro-batch the data axes do not divide)
            continue
        applied, flags, last = trial, [f for f in flags if kind not in f] + [flag], result
        if fits(result, target):
            return " ".join(flags), result
    for _ in range(6):  # then the accumulation the last compile's temporaries say would fit, until one does
        accum = scaled_accumulation(config, applied, last, target)
        if accum is None:
            break
        trial = {**applied, "train.grad_accum": accum}
        try:
            result = compile_or_oom(lambda: compile_for(with_overrides(config, trial)))
        except UserError:
            break
        applied, last = trial, result
        flags = [f for f in flags if "grad_accum" not in f] + [f"--config.train.grad_accum={accum}"]
        if fits(result, target):
            return " ".join(flags), result
    return None, None


def scaled_accumulation(config, applied: dict, last, target: Target) -> int | None:
    """The smallest gradient accumulation dividing the batch at which the last compile's temporaries,
    which scale with the micro-batch, would fit beside what does not scale (arguments, outputs,
    program); at least twice the current one after a refusal that gives no bytes; None if none is left
    to try, or what does not scale alone fills the device."""
    if last is None or target.chip is None:
        return None
    accum = int(applied.get("train.grad_accum", config.train.grad_accum))
    batch = int(config.data.batch_size)
    if isinstance(last, OutOfMemory) and not last.needed:
        want = accum * 2
    else:
        fixed, temp = ((0.0, last.needed) if isinstance(last, OutOfMemory)  # the total only: all of it scales
                       else (last.total_bytes - last.temp_bytes, last.temp_bytes))
        room = target.chip.hbm_bytes - fixed
        if room <= 0:
            return None
        want = accum * math.ceil(temp / room)
    return next((d for d in range(max(want, accum + 1), batch + 1) if batch % d == 0), None)


@dataclasses.dataclass
class Outcome:
    """A compile and, when it does not fit, the cheapest confirmed fix: ``stats`` (None if the
    compiler refused), ``oom``, ``fix`` (the flags) and ``fix_stats`` (the step with them)."""
    stats: CompileStats | None
    oom: OutOfMemory | None
    fits: bool
    fix: str | None = None
    fix_stats: CompileStats | None = None


def compile_with_fix(config, target: Target, compile_for: Callable, search: bool = True) -> Outcome:
    result = compile_or_oom(lambda: compile_for(config))
    ok = fits(result, target)
    out = Outcome(None if isinstance(result, OutOfMemory) else result,
                  result if isinstance(result, OutOfMemory) else None, ok)
    if not ok and search:
        out.fix, out.fix_stats = cheapest_fix(config, target, compile_for)
    return out
