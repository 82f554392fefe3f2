"""Device profiles: expert byte sizes S and promotion costs C^G, C^R in seconds (two-tier cache, §3.2-3.3).

A profile is a device (link bandwidths and latencies, how long one layer computes) and the size of one
expert; the trace supplies the model geometry (L MoE layers x E experts). Costs follow from bytes:

    C^G = vram_latency + S / vram_bandwidth     RAM -> VRAM (host-to-device copy)
    C^R = nvme_latency + S / nvme_bandwidth     NVMe -> RAM (storage read)

so an access costs 0 from VRAM, C^G from RAM and C^R + C^G from NVMe, and stall time reads in seconds.
While a layer computes (``compute_ms``), the links are otherwise idle: a policy may use that time to
prefetch, banking at most one expert's worth of idle link time (see :mod:`edge_jax.papers.expert_cache.engine`).

Presets (assumptions, stated so they can be changed; every field can be overridden in the config):

``pcie4-nvme``: a consumer GPU over PCIe 4.0 x16 (31.5 GB/s raw, ~25 GB/s for pinned host-to-device
copies) with a PCIe 4.0 NVMe SSD (~7 GB/s sequential read). Expert: one PhiMoE expert (3 matrices of
4096 x 6400) at 4 bits, 39.3 MB. One decode layer computes in ~0.1 ms (its ~100 MB of active weights at
~1 TB/s of VRAM bandwidth).

``phone``: a phone-class SoC whose accelerator-visible memory (tier G) is filled by copies within LPDDR5X
(~15 GB/s effective) from app RAM (tier R), over UFS 4.0 storage (~4 GB/s sequential read). Expert: one
Qwen1.5-MoE-A2.7B-sized expert (3 x 2048 x 1408) at 4 bits, 4.3 MB. One decode layer computes in ~2 ms
(~20 tokens/s over 24 layers).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from edge_jax.config import ConfigError

PRESETS = {
    "pcie4-nvme": dict(expert_bytes=3 * 4096 * 6400 // 2, vram_gbps=25.0, nvme_gbps=7.0,
                       vram_latency_us=10.0, nvme_latency_us=80.0, compute_ms=0.1),
    "phone": dict(expert_bytes=3 * 2048 * 1408 // 2, vram_gbps=15.0, nvme_gbps=4.0,
                  vram_latency_us=5.0, nvme_latency_us=100.0, compute_ms=2.0),
}


class ProfileError(ConfigError):
    """A profile that cannot describe this trace or device (one-line message with the fix)."""


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """Per-object sizes and costs over flattened objects o = layer * E + expert."""
    name: str
    n_layers: int
    n_experts: int
    sizes: np.ndarray     # float64 [L*E] bytes S
    cost_g: np.ndarray    # float64 [L*E] seconds C^G (RAM -> VRAM)
    cost_r: np.ndarray    # float64 [L*E] seconds C^R (NVMe -> RAM)
    credit_g: float       # bytes a prefetch RAM -> VRAM can move while one layer computes
    credit_r: float       # bytes a prefetch NVMe -> RAM can move while one layer computes

    @property
    def total_bytes(self) -> float:
        return float(self.sizes.sum())

    @property
    def uniform(self) -> bool:
        return bool(np.all(self.sizes == self.sizes[0]))

    def top_k_bytes(self, k: int) -> float:
        """The most bytes one layer's top-k can need: the smallest capacity any tier may have."""
        per_layer = np.sort(self.sizes.reshape(self.n_layers, self.n_experts), axis=1)[:, ::-1]
        return float(per_layer[:, :k].sum(axis=1).max())


def resolve(p) -> dict:
    """The preset's numbers with every non-default field of config section ``p`` (cache_sim config
    ``profile``) laid over them: 0 means "the preset's" for sizes, bandwidths and latencies, and a
    negative ``compute_ms`` means the preset's (0 is allowed: no time to prefetch)."""
    if p.preset not in PRESETS:
        raise ProfileError(f"unknown profile.preset {p.preset!r}; valid: {', '.join(PRESETS)}")
    out = dict(PRESETS[p.preset])
    for key in ("expert_bytes", "vram_gbps", "nvme_gbps", "vram_latency_us", "nvme_latency_us"):
        value = p[key]
        if value < 0:
            raise ProfileError(f"profile.{key} must be >= 0 (0: the preset's), got {value}")
        if value:
            out[key] = value
    if p.compute_ms >= 0:
        out["compute_ms"] = p.compute_ms
    return out


def build_profile(p, n_layers: int, n_experts: int, seed: int = 0) -> DeviceProfile:
    """The profile for a trace of ``n_layers`` x ``n_experts``; ``p`` is the config's ``profile`` section.

    ``p.n_layers`` / ``p.n_experts`` (0: the trace's) must match the trace when set. ``p.size_spread``
    s > 0 draws each expert's size from expert_bytes x U[1 - s, 1 + s] (seeded): heterogeneous formats.
    """
    for key, have in (("n_layers", n_layers), ("n_experts", n_experts)):
        want = p[key]
        if want and want != have:
            raise ProfileError(f"the trace has {have} {key[2:]} but profile.{key} is {want}; use a trace of this "
                               f"model or set profile.{key}=0 to take it from the trace")
    if not 0 <= p.size_spread < 1:
        raise ProfileError(f"profile.size_spread must be in [0, 1), got {p.size_spread}")
    v = resolve(p)
    n = n_layers * n_experts
    sizes = np.full(n, float(v["expert_bytes"]))
    if p.size_spread:
        rng = np.random.default_rng(seed)
        sizes = np.round(sizes * rng.uniform(1 - p.size_spread, 1 + p.size_spread, n))
    cost_g = v["vram_latency_us"] * 1e-6 + sizes / (v["vram_gbps"] * 1e9)
    cost_r = v["nvme_latency_us"] * 1e-6 + sizes / (v["nvme_gbps"] * 1e9)
    compute_s = v["compute_ms"] * 1e-3
    return DeviceProfile(name=p.preset, n_layers=n_layers, n_experts=n_experts, sizes=sizes, cost_g=cost_g,
                         cost_r=cost_r, credit_g=compute_s * v["vram_gbps"] * 1e9,
                         credit_r=compute_s * v["nvme_gbps"] * 1e9)


def capacities(profile: DeviceProfile, vram_fraction: float, ram_fraction: float, top_k: int) -> tuple[float, float]:
    """Byte capacities (K_G, K_R) as fractions of all experts' bytes; impossible ones fail in one line."""
    total = profile.total_bytes
    need = profile.top_k_bytes(top_k)
    for name, frac in (("vram_fraction", vram_fraction), ("ram_fraction", ram_fraction)):
        if not 0 < frac <= 1:
            raise ProfileError(f"cache.{name} must be in (0, 1], got {frac}")
        if frac * total < need:
            raise ProfileError(
                f"cache.{name}={frac:g} holds {frac * total / 1e6:.1f} MB but one layer's top-{top_k} experts need "
                f"{need / 1e6:.1f} MB, so a step could never run: raise it to at least {need / total:.4f}")
    if vram_fraction > ram_fraction:
        raise ProfileError(f"cache.vram_fraction={vram_fraction:g} exceeds cache.ram_fraction={ram_fraction:g}: every "
                           "VRAM expert is also in RAM (containment), so raise ram_fraction or lower vram_fraction")
    return vram_fraction * total, ram_fraction * total
