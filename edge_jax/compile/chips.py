"""Compile targets: TPU chips and slices (built from libtpu on any machine), NVIDIA cards (built from
the CUDA plugin: edge_jax.compile.gpus), simulated CPU devices, and this machine's own devices.

``--topology`` takes a Cloud TPU accelerator type (``v5p-128``, ``v5e-256``), an explicit slice
shape (``v5p:4x4x4``), ``cpu:N`` (N simulated host devices; needs
``XLA_FLAGS=--xla_force_host_platform_device_count>=N``, which the command sets when it starts
JAX itself) or ``local`` (``jax.devices()``: the GPU or TPU this process sees).

Chip figures per chip, from the Cloud TPU system-architecture pages (cloud.google.com/tpu/docs/v4,
/v5e, /v5p, /v6e; read 2026-11): HBM capacity and HBM bandwidth here, peak dense bf16 FLOP/s from
:data:`edge_jax.train.flops.PEAKS` (by device kind: training's MFU reads the same figures). A
"core" in the accelerator type is a TensorCore: v4 and v5p chips have two (fused into one
megacore device, as JAX sees them), v5e and v6e one.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re

from edge_jax.errors import ConfigError, one_line, unknown
from edge_jax.train.flops import peak_flops
from edge_jax.utils.extras import require

GiB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: float        # per device (one chip, or one megacore)
    peak_flops: float       # dense bf16 FLOP/s per device
    hbm_bandwidth: float    # bytes/s per device
    cores_per_chip: int     # TensorCores counted by the accelerator type's number
    dims: int               # 2-D or 3-D torus
    platform: str = "tpu"   # the kernels' platform (``gpu``: edge_jax.compile.gpus)


CHIPS = {
    "v4": Chip("TPU v4", 32 * GiB, peak_flops("TPU v4"), 1200e9, 2, 3),
    "v5e": Chip("TPU v5e", 16 * GiB, peak_flops("TPU v5e"), 819e9, 1, 2),
    "v5p": Chip("TPU v5p", 95 * GiB, peak_flops("TPU v5p"), 2765e9, 2, 3),
    "v6e": Chip("TPU v6e", 32 * GiB, peak_flops("TPU v6e"), 1640e9, 1, 2),
}
# Slice shapes by chip count (the single-slice shapes of the Cloud TPU pages).
SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
             512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16"}


@dataclasses.dataclass(frozen=True)
class Target:
    """What a step is compiled for: its devices (all slices), the chip or card (None: CPU or local
    devices, no roofline), how many slices, and the name the table prints."""
    name: str
    devices: tuple
    chip: Chip | None
    slices: int = 1

    @property
    def platform(self) -> str | None:
        """The kernels' platform (``tpu``, ``gpu``); None for CPU and local devices."""
        return self.chip.platform if self.chip is not None else None


def cloud_names(gen: str) -> list[str]:
    """The Cloud accelerator types of one generation (``v5e-1`` ... ``v5e-256``)."""
    chip = CHIPS[gen]
    return [f"{gen}-{n * chip.cores_per_chip}" for n in (SHAPES_3D if chip.dims == 3 else SHAPES_2D)]


def known_topologies() -> list[str]:
    """Every ``--topology`` spelling of a Cloud accelerator type and a GPU, plus ``cpu:N`` and ``local``."""
    from edge_jax.compile import gpus
    return [name for gen in CHIPS for name in cloud_names(gen)] + gpus.known() + ["cpu:N", "local"]


def host_bounds(dims: list[int]) -> tuple[int, int, int]:
    """Chips per host of a slice for libtpu: 2x2x1 (a TPU VM of a multi-host slice holds 4 chips), 1
    along a side of odd length (one-chip v5e-1 / v6e-1, or an explicit v5e:1x2), which libtpu
    refuses to cut into 2-chip hosts."""
    return tuple(2 if i < 2 and dims[i] % 2 == 0 else 1 for i in range(3))


def slice_shape(name: str) -> tuple[str, str]:
    """``(generation, "AxBxC")`` of ``v5p-128`` or ``v5p:4x4x4``; a one-line error otherwise."""
    m = re.fullmatch(r"(v\d+[a-z]?)[-:](\S+)", name)
    gen = m.group(1) if m else None
    if gen not in CHIPS:
        near = unknown("topology", name, known_topologies())
        valid = ", ".join(f"{gen}-" + "|".join(n.split("-")[1] for n in cloud_names(gen)) for gen in CHIPS)
        head = near.split("; valid:")[0]
        raise ConfigError(f"{head}{' ' if head.endswith('?') else '; '}valid: {valid}, an explicit slice "
                          "(v5p:4x4x4), h100, h200, a100, Nxh100 (N cards on one host), cpu:N, local")
    chip, rest = CHIPS[gen], m.group(2)
    shapes = SHAPES_3D if chip.dims == 3 else SHAPES_2D
    if re.fullmatch(r"[1-9]\d*(x[1-9]\d*){%d}" % (chip.dims - 1), rest):
        return gen, rest
    if rest.isdigit() and int(rest) % chip.cores_per_chip == 0 and int(rest) // chip.cores_per_chip in shapes:
        return gen, shapes[int(rest) // chip.cores_per_chip]
    valid = ", ".join(cloud_names(gen))
    raise ConfigError(f"topology {name!r}: {gen} slices are {valid} (or {gen}:AxB{'xC' * (chip.dims == 3)})")


def tpu_target(name: str, slices: int = 1) -> Target:
    """The devices of a TPU slice (``slices`` of them over DCN), from libtpu's compile-only client."""
    gen, shape = slice_shape(name)
    require("libtpu", f"compiling for {name}")
    from jax.experimental import topologies
    dims = [int(x) for x in shape.split("x")]
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=f"{gen}:{shape}",
                                            chip_config_name="megacore" if gen == "v4" else "default",
                                            chips_per_host_bounds=host_bounds(dims), num_slices=slices)
    except Exception as e:  # noqa: BLE001 - libtpu's refusal (a JaxRuntimeError) of a slice shape
        # it does not build
        raise ConfigError(f"topology {name!r}: libtpu cannot build slice {gen}:{shape} ({one_line(e)}); use a "
                          f"Cloud TPU type: {', '.join(cloud_names(gen))}") from None
    chips = math.prod(dims)
    label = f"{gen}-{chips * CHIPS[gen].cores_per_chip}" + (f" x{slices} slices" if slices > 1 else "")
    return Target(label, tuple(topo.devices), CHIPS[gen], slices)


def host_target(name: str) -> Target:
    """``cpu:N`` (simulated host devices) or ``local`` (this process's devices)."""
    import jax
    if name == "local":
        devices = jax.devices()
        return Target(f"local ({len(devices)}x {devices[0].device_kind})", tuple(devices), None)
    if not re.fullmatch(r"cpu:[1-9]\d*", name):
        raise ConfigError(f"topology {name!r}: write cpu:N with N >= 1 simulated devices, e.g. cpu:8")
    n = int(name.partition(":")[2])
    have = jax.devices("cpu")
    if n < 1 or n > len(have):
        raise ConfigError(f"topology {name!r} needs {n} CPU devices and this process has {len(have)}; start it "
                          f"with XLA_FLAGS=--xla_force_host_platform_device_count={max(n, 1)}")
    return Target(f"cpu:{n}", tuple(have[:n]), None)


def gpu_target(name: str) -> Target:
    """``h100``, ``8xh100`` ...: deviceless NVIDIA cards from the CUDA plugin (edge_jax.compile.gpus)."""
    from edge_jax.compile import gpus
    n, key = gpus.parse(name)
    card = gpus.CARDS[key]
    chip = Chip(card.name, card.memory_bytes, card.peak_bf16, card.bandwidth, 1, 1, platform="gpu")
    return Target(f"{n}x {key}" if n > 1 else key, gpus.devices(name), chip)


def make_target(name: str, slices: int = 1) -> Target:
    from edge_jax.compile import gpus
    if slices < 1:
        raise ConfigError(f"--slices must be >= 1, got {slices}")
    host, gpu = name == "local" or name.startswith("cpu:"), gpus.parse(name) is not None
    if (host or gpu) and slices != 1:
        raise ConfigError(f"--slices applies to TPU topologies only, not {name!r}")
    if host:
        return host_target(name)
    return gpu_target(name) if gpu else tpu_target(name, slices)


def prepare_for_argv(argv: list[str], program: bool = False) -> None:
    """:func:`prepare_environment` for a command line's ``--topology`` (compile, grid --compile-only),
    called by the entry points before anything imports JAX; a ``program`` (not ``main(argv)`` called in
    a process that may compile for a GPU later) also keeps the CUDA plugin out where it is not needed
    (:func:`edge_jax.compile.gpus.hide_plugin_unless_needed`)."""
    from edge_jax.compile import gpus
    topology = topology_of(argv)
    prepare_environment(topology)
    if program:
        gpus.hide_plugin_unless_needed(topology)


def topology_of(argv: list[str]) -> str:
    """The ``--topology`` of a command line ("" if none)."""
    for i, a in enumerate(argv):
        if a.startswith("--topology"):
            return a.partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else "")
    return ""


def prepare_environment(topology: str) -> None:
    """Before JAX starts a backend: for a TPU slice, a GPU card or ``cpu:N``, run on the CPU backend (so
    libtpu does not probe for a chip, nor the CUDA plugin for a driver) and, for ``cpu:N``, ask for N
    simulated devices."""
    if not topology or topology == "local":
        return
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile-only: no chip is locked
    if topology.startswith("cpu:") and topology[4:].isdigit():
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={topology[4:]}".strip()
