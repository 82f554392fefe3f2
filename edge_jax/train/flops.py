"""A step's model FLOPs, what a device can do, and the step's achieved TFLOP/s and MFU.

Model FLOPs are PaLM's count (:func:`model_flops`): what the model needs, not what the compiler
runs (remat recompute and padding do not count), so MFU = model FLOPs / (devices x peak x step
time) is comparable across configs and with other codebases. ``edge-jax compile`` uses the same
count for its roofline estimate (:mod:`edge_jax.compile.report`).

:data:`PEAKS` holds each known device's peak dense matmul FLOP/s by compute dtype, keyed by the
``device_kind`` JAX reports; the compile targets' chip tables (:mod:`edge_jax.compile.chips`,
:mod:`edge_jax.compile.gpus`) take their bf16 peaks from here. TPUs: the Cloud TPU
system-architecture pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e); NVIDIA cards: the data
sheets (H100 SXM5 80 GB, H200 SXM 141 GB, A100 SXM4 80 GB), tensor cores without sparsity; read
2026-11. A float32 matmul runs at XLA's default precision (:class:`jax.lax.Precision` ``DEFAULT``,
which the models use): one bf16 pass on a TPU, TF32 on an NVIDIA A100/H100/H200, so its peak is the
bf16 one on a TPU and the TF32 one on those cards.

This module imports no JAX (the compile tables read it in commands that start none).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Peak:
    """Peak dense matmul FLOP/s of one device (a chip, a megacore, a card) by compute dtype."""
    bfloat16: float
    float32: float      # at XLA's default precision (see the module docstring)

    def of(self, dtype: str) -> float:
        return getattr(self, dtype)


PEAKS = {
    "TPU v4": Peak(275e12, 275e12),             # one megacore (2 TensorCores)
    "TPU v5 lite": Peak(197e12, 197e12),        # v5e
    "TPU v5p": Peak(459e12, 459e12),            # one megacore
    "TPU v6 lite": Peak(918e12, 918e12),        # v6e (Trillium)
    "NVIDIA H100 80GB HBM3": Peak(989.4e12, 494.7e12),
    "NVIDIA H200": Peak(989.4e12, 494.7e12),
    "NVIDIA A100-SXM4-80GB": Peak(312e12, 156e12),
}
# Other spellings of the same devices (jax._src.pallas.mosaic.tpu_info lists both for each TPU).
ALIASES = {"TPU v5e": "TPU v5 lite", "TPU v5": "TPU v5p", "TPU v6e": "TPU v6 lite"}


def peak_flops(device_kind: str, dtype: str = "bfloat16") -> float | None:
    """Peak dense FLOP/s of one device of ``device_kind`` (``jax.devices()[0].device_kind``) computing
    in ``dtype`` (``model.dtype``); None for a device not in :data:`PEAKS` (a CPU, another card)."""
    peak = PEAKS.get(ALIASES.get(device_kind, device_kind))
    return None if peak is None else peak.of(dtype)


def model_flops(cfg, tokens: int, seq: int, train: bool = True) -> float:
    """Model FLOPs of a step (PaLM's count, all devices together): ``6 N`` per token over the
    matmul params N (embedding only when tied, MoE experts at top_k / experts, token-indexed memory
    tables excluded: they are looked up, not multiplied), plus ``12 L H K T`` per token for
    attention scores and values (non-causal count). Forward only: a third of it."""
    from edge_jax.models.count import ROM_AXES, param_sizes  # the model (JAX) only when counting
    n = 0.0
    for _, size, names in param_sizes(cfg):
        names = tuple(x for x in names if x != "layers")  # a scanned stack's leading axis
        if len(names) < 2 or names in ROM_AXES or (names == ("vocab", "embed") and not cfg.tie_embeddings):
            continue
        n += size * cfg.moe_top_k / cfg.moe_experts if "expert" in names else size
    per_token = 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq
    return per_token * tokens / (1 if train else 3)


class StepFlops:
    """The train step's model FLOPs (counted once, for the whole global batch) and the device's peak:
    :meth:`metrics` turns a step time into TFLOP/s per device and MFU.

    ``model_cfg`` is the run's :class:`~edge_jax.models.ModelConfig` (``run.model.cfg``), ``config``
    the run's config (``data.batch_size`` x ``data.seq_len`` tokens a step), ``n_devices`` the devices
    the step runs on (every process's), ``device_kind`` theirs (``jax.devices()[0].device_kind``)."""

    def __init__(self, model_cfg, config, n_devices: int, device_kind: str):
        seq = int(config.data.seq_len)
        self.flops = model_flops(model_cfg, int(config.data.batch_size) * seq, seq)
        self.n_devices = int(n_devices)
        self.peak = peak_flops(device_kind, model_cfg.dtype)

    def metrics(self, step_time_s: float | None) -> dict:
        """``{"tflops_per_device": ..., "mfu": ...}`` for a step of ``step_time_s`` seconds; ``mfu`` is
        left out where the device's peak is unknown, and both where there is no step time."""
        if not step_time_s or step_time_s <= 0:
            return {}
        per_device = self.flops / step_time_s / self.n_devices
        out = {"tflops_per_device": per_device / 1e12}
        if self.peak:
            out["mfu"] = per_device / self.peak
        return out
