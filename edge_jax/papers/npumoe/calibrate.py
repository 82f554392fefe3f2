"""Offline expert-load calibration for static MoE capacity plans (NPUMoE §4.1, §5.8).

Per MoE layer we count the tokens each expert receives on a calibration set (:func:`expert_loads`),
rank experts by popularity, and derive the imbalance ratio and capacities with
:mod:`edge_jax.layers.moe.plan`. :func:`overlap_at_k` validates a calibration against held-out (or
cross-dataset) loads with per-layer Overlap@K (Li et al. 2025). The result is a small JSON file
(:func:`write_calibration` / :func:`read_calibration`) plus a markdown report
(:func:`calibration_markdown`). Pure numpy.

Ranking (used everywhere): load descending, ties broken by the smaller expert id first (a stable
sort of ``-load``), so rankings and Overlap@K are deterministic.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from edge_jax.errors import UserError
from edge_jax.layers.moe.plan import (
    LayerPlan,
    base_capacity,
    busiest_capacity,
    imbalance_ratio,
)
from edge_jax.utils.atomic import write_json_atomic

VERSION = 1
RECALIBRATE = "`edge-jax moe calibrate --workdir {}`"


class CalibrationError(UserError, ValueError):
    """A calibration input or file that cannot be used; the message names the fix."""


def expert_loads(experts_NLJ, n_experts: int, valid_N=None) -> np.ndarray:
    """Assignment counts ``[L, E]`` (int64) from the top-k expert ids ``[N, L, J]`` of N tokens;
    tokens whose ``valid_N`` is False (padding) are not counted."""
    ids_NLJ = np.asarray(experts_NLJ)
    if ids_NLJ.ndim != 3:
        raise CalibrationError(f"expert ids must be [tokens, layers, top_k], got shape {ids_NLJ.shape}")
    if ids_NLJ.size and (ids_NLJ.min() < 0 or ids_NLJ.max() >= n_experts):
        raise CalibrationError(f"expert ids must lie in [0, {n_experts}), got [{ids_NLJ.min()}, "
                               f"{ids_NLJ.max()}]; pass the model's n_experts")
    n, n_layers, k = ids_NLJ.shape
    flat_NLJ = ids_NLJ.astype(np.int64) + n_experts * np.arange(n_layers)[None, :, None]
    weight_NLJ = None
    if valid_N is not None:
        valid_N = np.asarray(valid_N, bool)
        if valid_N.shape != (n,):
            raise CalibrationError(f"valid mask must be [{n}] (one flag per token), got {valid_N.shape}")
        weight_NLJ = np.broadcast_to(valid_N[:, None, None], ids_NLJ.shape).ravel().astype(np.int64)
    counts = np.bincount(flat_NLJ.ravel(), weights=weight_NLJ, minlength=n_layers * n_experts)
    return counts.astype(np.int64).reshape(n_layers, n_experts)


def ranking(load_E) -> np.ndarray:
    """Expert ids, most popular first (ties: smaller id first)."""
    return np.argsort(-np.asarray(load_E, np.int64), axis=-1, kind="stable")


def overlap_at_k(load_a_LE, load_b_LE, k: int) -> np.ndarray:
    """Per-layer Overlap@K ``|TopK(a) ∩ TopK(b)| / K`` as a float array ``[L]`` in [0, 1]."""
    a_LE, b_LE = np.asarray(load_a_LE), np.asarray(load_b_LE)
    if a_LE.ndim != 2 or a_LE.shape != b_LE.shape:
        raise CalibrationError(f"overlap needs two [layers, experts] loads of one shape, got "
                               f"{a_LE.shape} and {b_LE.shape}")
    if not 1 <= k <= a_LE.shape[1]:
        raise CalibrationError(f"Overlap@{k} needs 1 <= K <= {a_LE.shape[1]} experts; use a smaller K")
    top_a_LJ, top_b_LJ = ranking(a_LE)[:, :k], ranking(b_LE)[:, :k]
    hit_LJ = (top_a_LJ[:, :, None] == top_b_LJ[:, None, :]).any(-1)
    return hit_LJ.sum(-1) / k


def overlap_summary(load_a_LE, load_b_LE, ks=(4, 8)) -> dict:
    """``{"overlap@K_median": .., "overlap@K_mean": ..}`` over layers for each K (fractions)."""
    out = {}
    for k in ks:
        ov_L = overlap_at_k(load_a_LE, load_b_LE, k)
        out[f"overlap@{k}_median"] = float(np.median(ov_L))
        out[f"overlap@{k}_mean"] = float(np.mean(ov_L))
    return out


def plan_estimates(plan: LayerPlan, load_E, chunk: int, top_k: int) -> tuple[float, float]:
    """Expected ``(padding, drop)`` of a plan per chunk given the calibrated shares: padding is the
    fraction of buffer rows left empty, drop the fraction of assignments beyond a static expert's
    capacity (fallback experts run exactly: no padding, no drops)."""
    load = np.asarray(load_E, np.float64)
    share = load / load.sum() if load.sum() > 0 else np.full(len(load), 1.0 / len(load))
    expected_E = share * chunk * top_k
    cap_E = np.asarray(plan.capacity, np.float64)
    static_E = np.zeros(len(load), bool)
    static_E[list(plan.order())] = True
    pad = np.maximum(0.0, cap_E - expected_E)[static_E].sum()
    drop = np.maximum(0.0, expected_E - cap_E)[static_E].sum()
    return float(pad / plan.buffer_rows) if plan.buffer_rows else 0.0, float(drop / (chunk * top_k))


@dataclasses.dataclass(frozen=True)
class Calibration:
    loads: np.ndarray  # [L, E] int64
    layers: tuple[int, ...]
    n_experts: int
    top_k: int
    chunk: int
    overlap: dict | None = None
    meta: dict | None = None


def write_calibration(path, loads_LE, layers, n_experts: int, top_k: int, chunk: int, meta=None,
                      plans=None, overlap=None) -> dict:
    """Write the calibration JSON atomically; returns the written record."""
    load_LE = np.asarray(loads_LE, np.int64)
    layers = [int(i) for i in layers]
    if load_LE.shape != (len(layers), n_experts):
        raise CalibrationError(f"loads of shape {load_LE.shape} do not match {len(layers)} MoE layers "
                               f"of {n_experts} experts")
    if plans is not None and (len(plans) != len(layers) or any(p.n_experts != n_experts for p in plans)):
        raise CalibrationError(f"need one plan of {n_experts} experts per MoE layer ({len(layers)})")
    per_layer = []
    for i, (layer, load_E) in enumerate(zip(layers, load_LE)):
        rec = {"layer": layer, "load": [int(x) for x in load_E],
               "ranking": [int(e) for e in ranking(load_E)],
               "imbalance": imbalance_ratio(load_E),
               "base_capacity": base_capacity(chunk, top_k, n_experts),
               "busiest_capacity": busiest_capacity(load_E, chunk, top_k)}
        if plans is not None:
            p = plans[i]
            pad, drop = plan_estimates(p, load_E, chunk, top_k)
            rec.update(capacity=list(p.capacity), groups=[list(g) for g in p.groups],
                       fallback=list(p.fallback), hot=[e for e in range(n_experts) if e not in p.fallback],
                       padding_estimate=pad, drop_estimate=drop)
        per_layer.append(rec)
    record = {"version": VERSION, "n_experts": int(n_experts), "top_k": int(top_k), "chunk": int(chunk),
              "layers": layers, "per_layer": per_layer,
              "overlap": {k: float(v) for k, v in overlap.items()} if overlap is not None else None,
              "meta": meta or {}}
    write_json_atomic(path, record)
    return record


def read_calibration(path, n_layers: int | None = None, n_experts: int | None = None,
                     workdir: str = "W") -> Calibration:
    """Load and check a calibration file against the model (``n_layers`` MoE layers of ``n_experts``)."""
    fix = RECALIBRATE.format(workdir)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CalibrationError(f"no calibration file at {path}; run {fix} first") from None
    except OSError as e:
        raise CalibrationError(f"cannot read calibration file {path} ({e}); recalibrate with {fix}") from None
    try:
        rec = json.loads(text)
        if rec.get("version") != VERSION:
            raise CalibrationError(f"calibration file {path} has version {rec.get('version')!r}, this code "
                                   f"reads version {VERSION}; recalibrate with {fix}")
        layers = tuple(int(i) for i in rec["layers"])
        load_LE = np.array([r["load"] for r in rec["per_layer"]], np.int64)
        cal = Calibration(load_LE, layers, int(rec["n_experts"]), int(rec["top_k"]), int(rec["chunk"]),
                          rec.get("overlap"), rec.get("meta"))
    except CalibrationError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CalibrationError(f"calibration file {path} is unreadable or truncated "
                               f"({type(e).__name__}: {e}); recalibrate with {fix}") from None
    if load_LE.shape != (len(layers), cal.n_experts):
        raise CalibrationError(f"calibration file {path} is inconsistent (loads of shape {load_LE.shape} for "
                               f"{len(layers)} layers of {cal.n_experts} experts); recalibrate with {fix}")
    want_l = len(layers) if n_layers is None else n_layers
    want_e = cal.n_experts if n_experts is None else n_experts
    if (want_l, want_e) != (len(layers), cal.n_experts):
        raise CalibrationError(f"calibration file {path} has {len(layers)} MoE layers of {cal.n_experts} "
                               f"experts but the model has {want_l} of {want_e}; recalibrate with {fix}")
    return cal


def _tiers(plan: LayerPlan) -> str:
    caps = [plan.capacity[e] for e in plan.order()]
    return ", ".join(f"{c}×{caps.count(c)}" for c in sorted(set(caps), reverse=True)) or "-"


def calibration_markdown(cal: Calibration, plans=None, top: int = 4) -> str:
    """A short markdown report: one row per MoE layer, then the overlap summary if present."""
    lines = [f"# MoE calibration: {len(cal.layers)} layers, {cal.n_experts} experts, top-{cal.top_k}, "
             f"chunk {cal.chunk}", "",
             "| layer | imbalance | base | busiest | top experts | tiers (cap×n) | groups | hot | fallback "
             "| padding | drop |", "|" + "---|" * 11]
    for i, (layer, load_E) in enumerate(zip(cal.layers, cal.loads)):
        row = [str(layer), f"{imbalance_ratio(load_E):.2f}",
               str(base_capacity(cal.chunk, cal.top_k, cal.n_experts)),
               str(busiest_capacity(load_E, cal.chunk, cal.top_k)),
               ", ".join(str(int(e)) for e in ranking(load_E)[:top])]
        if plans is not None:
            p = plans[i]
            pad, drop = plan_estimates(p, load_E, cal.chunk, cal.top_k)
            row += [_tiers(p), str(len(p.groups)), str(p.n_experts - len(p.fallback)), str(len(p.fallback)),
                    f"{pad:.1%}", f"{drop:.1%}"]
        else:
            row += ["-"] * 6
        lines.append("| " + " | ".join(row) + " |")
    if cal.overlap:
        lines += ["", "Overlap@K (calibration vs held-out):", ""]
        lines += [f"- {k}: {v:.1%}" for k, v in cal.overlap.items()]
    return "\n".join(lines) + "\n"
