"""NVIDIA GPUs as compile targets, without a GPU: ``--topology h100``, ``h200``, ``a100`` or ``Nxh100``
(N cards on one host).

XLA compiles for a GPU it does not have when it is told the card: the CUDA plugin (the ``cuda`` extra)
builds a deviceless topology from a ``GpuTargetConfigProto`` text, and ``jit(...).lower(...).compile()``
for its devices runs the real GPU compiler (ptxas included), so a step that does not fit the card's
memory, or a Triton kernel whose blocks do not fit its registers or shared memory, fails here.

The card facts (SMs, shared memory, registers, L2, clock, memory, bandwidth; the dense bf16 FLOP/s
from :data:`edge_jax.train.flops.PEAKS`, by device kind) are from NVIDIA's data sheets and CUDA's
device query for each card (H100 SXM5 80 GB, H200 SXM 141 GB, A100 SXM4 80 GB; read 2026-11).
Memory is what ``nvidia-smi`` reports as ``memory.total``; JAX preallocates 75 % of it unless
``XLA_PYTHON_CLIENT_MEM_FRACTION`` says otherwise (docs/compile.md).
XLA's GPU compiler gives no cost analysis, so a GPU row has no compiled FLOP count: its roofline is
on the model's FLOPs, a lower bound on the step time (edge_jax.compile.report).
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.machinery
import os
import re
import sys
import types

from edge_jax.train.flops import peak_flops
from edge_jax.utils.extras import installed, require

MiB = 2 ** 20


@dataclasses.dataclass(frozen=True)
class Card:
    name: str                   # the device_kind the CUDA driver reports
    memory_bytes: int
    bandwidth: float            # HBM bytes/s
    peak_bf16: float            # dense bf16 FLOP/s (tensor cores, no sparsity)
    sms: int
    capability: tuple[int, int]
    smem_per_sm: int            # shared memory per SM, bytes
    smem_optin: int             # the most one block may opt in to
    l2_bytes: int
    clock_ghz: float            # boost clock
    fp32_per_sm: int


CARDS = {
    "h100": Card("NVIDIA H100 80GB HBM3", 81559 * MiB, 3.35e12, peak_flops("NVIDIA H100 80GB HBM3"), 132, (9, 0),
                 228 * 1024, 227 * 1024, 50 * MiB, 1.98, 128),
    "h200": Card("NVIDIA H200", 143771 * MiB, 4.8e12, peak_flops("NVIDIA H200"), 132, (9, 0), 228 * 1024, 227 * 1024,
                 50 * MiB, 1.98, 128),
    "a100": Card("NVIDIA A100-SXM4-80GB", 81920 * MiB, 2.039e12, peak_flops("NVIDIA A100-SXM4-80GB"), 108, (8, 0),
                 164 * 1024, 163 * 1024, 40 * MiB, 1.41, 64),
}


def target_config(card: Card) -> str:
    """The ``GpuTargetConfigProto`` text (xla/stream_executor/device_description.proto) of ``card``."""
    major, minor = card.capability
    info = {"name": f'"{card.name}"', "threads_per_block_limit": 1024, "threads_per_warp": 32,
            "shared_memory_per_block": 48 * 1024, "shared_memory_per_core": card.smem_per_sm,
            "threads_per_core_limit": 2048, "core_count": card.sms, "fpus_per_core": card.fp32_per_sm,
            "block_dim_limit_x": 2 ** 31 - 1, "block_dim_limit_y": 65535, "block_dim_limit_z": 65535,
            "memory_bandwidth": int(card.bandwidth), "l2_cache_size": card.l2_bytes,
            "clock_rate_ghz": card.clock_ghz, "device_memory_size": card.memory_bytes,
            "shared_memory_per_block_optin": card.smem_optin, "registers_per_core_limit": 65536,
            "registers_per_block_limit": 65536}
    lines = [f"  {k}: {v}" for k, v in info.items()]
    lines.append(f"  cuda_compute_capability {{ major: {major} minor: {minor} }}")
    return ("gpu_device_info {\n" + "\n".join(lines) + "\n}\n"
            'platform_name: "CUDA"\n'
            "dnn_version_info { major: 9 minor: 8 }\n"
            "runtime_version { major: 12 minor: 8 }\n"
            f'device_description_str: "{card.name}"\n')


def parse(name: str) -> tuple[int, str] | None:
    """``(cards, key)`` of ``h100`` / ``8xh100``; None if ``name`` is not a GPU topology."""
    m = re.fullmatch(r"(?:([1-9]\d*)x)?([a-z]\d+)", name)
    if not m or m.group(2) not in CARDS:
        return None
    return int(m.group(1) or 1), m.group(2)


def known() -> list[str]:
    return [*CARDS, *(f"8x{k}" for k in CARDS)]


def has_plugin() -> bool:
    """Whether the CUDA plugin (the ``cuda`` extra) is installed; without it there is no ``jax_plugins``
    package at all."""
    return installed("jax_plugins.xla_cuda12")


def devices(name: str) -> tuple:
    """The deviceless devices of GPU topology ``name`` (one host), from the CUDA plugin."""
    n, key = parse(name)
    require("jax_plugins.xla_cuda12", f"compiling for {name}")
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(platform="cuda", target_config=target_config(CARDS[key]),
                                        topology=f"1x1x{n}")
    return tuple(topo.devices)


def hide_plugin_unless_needed(topology: str) -> None:
    """Keep the CUDA plugin from loading in a process that runs JAX on other platforms only and compiles
    for no GPU. On a machine without an NVIDIA driver its libraries print two lines to stderr each time
    one loads (when JAX is imported, and when it starts its backends), before any logging is set up:
    noise on every command, and more lines beside a one-line error. Called by the programs' entry
    points before JAX is imported (not by ``main(argv)`` called in a process that may compile for a GPU
    later): JAX then finds no ``jax_cuda12_plugin`` and a stand-in plugin that registers nothing."""
    platforms = os.environ.get("JAX_PLATFORMS")
    if platforms is None:   # JAX will choose: a card the NVIDIA driver shows needs the plugin
        needed = bool(glob.glob("/dev/nvidia[0-9]*"))
    else:
        needed = "cuda" in platforms or "gpu" in platforms
    if needed or parse(topology) is not None:
        return
    if has_plugin() and "jax_plugins.xla_cuda12" not in sys.modules:
        sys.modules.setdefault("jax_cuda12_plugin", None)   # None: its imports fail, as if not installed
        stand_in = types.ModuleType("jax_plugins.xla_cuda12")
        stand_in.__spec__ = importlib.machinery.ModuleSpec(stand_in.__name__, None)
        stand_in.initialize = lambda: None
        sys.modules[stand_in.__name__] = stand_in
