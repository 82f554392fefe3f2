"""Calibration of a trained MoE run and the metrics of its execution strategy (NPUMoE §4-§5).

:func:`calibrate` runs the model dropless over calibration text (the first ``moe.calib_batches``
training windows), counts each expert's load per layer, derives the capacity plans the config asks
for, and measures Overlap@K against held-out routing (validation windows) and against a second
dataset. :func:`moe_metrics` compares the run's strategy with dropless on the validation batches:
loss and next-token accuracy change, drop %, padding %, expert calls per layer, and the latency per
token of the MoE layers executed by :class:`~edge_jax.papers.npumoe.runtime.LayerRuntime` on the hidden
states of the first ``moe.time_batches`` batches.
"""
from __future__ import annotations

import dataclasses
import os

import jax.numpy as jnp
import ml_collections
import numpy as np

from edge_jax.data import make_eval_batches
from edge_jax.layers.moe import execute
from edge_jax.layers.moe.plan import MoEExec, imbalance_ratio
from edge_jax.models import DecoderLM
from edge_jax.papers.npumoe.calibrate import (
    calibration_markdown,
    expert_loads,
    overlap_summary,
    write_calibration,
)
from edge_jax.papers.npumoe.capture import routing_pass
from edge_jax.utils.atomic import write_text_atomic


def dropless_model(model) -> DecoderLM:
    x = model.cfg.moe_exec
    return DecoderLM(dataclasses.replace(model.cfg, moe_exec=MoEExec("dropless", x.chunk, x.drop)))


def eval_batches(run, name: str, split: str, n: int) -> list[dict]:
    data = ml_collections.ConfigDict(run.config.data.to_dict())
    data.name = name
    return make_eval_batches(data, run.tokenizer, split, n)


def other_dataset(name: str) -> str:
    """The second dataset of the cross-dataset Overlap@K (NPUMoE §5.8)."""
    return "facts" if name != "facts" else "pystdlib"


def calibrate(run, params, data: str = "", second: str = "", batches: int = 0, overlap: bool = True) -> dict:
    """Loads [L, E] of the calibration text, the plans for ``run.config``, and with ``overlap`` the
    Overlap@K against held-out text and a second dataset. ``data`` defaults to the run's dataset,
    ``second`` to :func:`other_dataset`."""
    from edge_jax.papers.npumoe.setup import moe_exec
    from edge_jax.train.setup import model_config
    cfg = run.config
    data = data or cfg.data.name
    second = second or other_dataset(data)
    n = batches or cfg.moe.calib_batches
    ref = dropless_model(run.model)

    def loads(name, split):
        ids = routing_pass(ref, params, eval_batches(run, name, split, n)).ids_NLJ()
        return expert_loads(ids, cfg.model.moe_experts)

    cal = loads(data, "train")
    if overlap:
        held, cross = loads(data, "validation"), loads(second, "validation")
        ks = tuple(k for k in (4, 8) if k <= cfg.model.moe_experts)
        overlap = {**{f"heldout_{k}": v for k, v in overlap_summary(cal, held, ks).items()},
                   **{f"cross_{k}": v for k, v in overlap_summary(cal, cross, ks).items()}}
    model = DecoderLM(dataclasses.replace(model_config(cfg), moe_exec=moe_exec(cfg, cal)))
    return {"loads": cal, "plans": model.cfg.moe_exec.plans or None, "overlap": overlap or None, "model": model,
            "meta": {"data": data, "second": second, "batches": n, "tokens": int(cal.sum() // cfg.model.moe_top_k)}}


def write_report(cal: dict, run, out_dir: str) -> tuple[str, str]:
    """``calibration.json`` (read by ``moe.plan``) and ``calibration.md`` in ``out_dir``."""
    from edge_jax.papers.npumoe.calibrate import read_calibration
    m = run.config.model
    path = os.path.join(out_dir, "calibration.json")
    write_calibration(path, cal["loads"], run.model.cfg.moe_layer_ids(), m.moe_experts, m.moe_top_k,
                      run.config.moe.chunk, meta=cal["meta"], plans=cal["plans"], overlap=cal["overlap"])
    md = os.path.join(out_dir, "calibration.md")
    write_text_atomic(md, calibration_markdown(read_calibration(path), cal["plans"]))
    return path, md


def calibrate_run(run, params, workdir: str | None):
    """``run`` with its model rebuilt on plans calibrated now (written to ``workdir`` if given)."""
    cal = calibrate(run, params, overlap=False)
    if workdir:
        write_report(cal, run, workdir)
    print(f"calibrated {len(cal['loads'])} MoE layers on {cal['meta']['tokens']:,} tokens "
          "(Overlap@K: edge-jax moe calibrate)", flush=True)
    return dataclasses.replace(run, model=cal["model"]), cal


def _experts(params, layer: int):
    p = params[f"layers_{layer}"]["moe"]
    return tuple(np.asarray(getattr(p[k], "value", p[k])) for k in ("gate", "up", "down"))


def latency_per_token(model, params, inputs, repeats: int = 10) -> float:
    """Seconds per token of all MoE layers, each chunk executed by the runtime (NPUMoE's dispatch);
    capacity-bound strategies only. ``inputs``: per batch, per MoE layer (x, ids, weights, saliency)."""
    from edge_jax.papers.npumoe.runtime import LayerRuntime, time_runtime
    ex = model.cfg.moe_exec
    total = 0.0
    for li, layer in enumerate(model.cfg.moe_layer_ids()):
        experts = _experts(params, layer)
        rt = LayerRuntime(ex.plans[li], experts, overflow=ex.overflow)
        chunks = []
        for batch_layers in inputs:
            parts = execute.chunked(*(jnp.asarray(a) for a in batch_layers[li]), ex.chunk, ex.drop)
            chunks += [tuple(a[i] for a in parts) for i in range(len(parts[0]))]
        total += time_runtime(rt, chunks, repeats)
    return total


def moe_metrics(run, params, batches, time_batches: int = 0) -> dict:
    """The strategy against dropless on ``batches`` (see the module docstring)."""
    model = run.model
    ex = model.cfg.moe_exec
    ref = routing_pass(dropless_model(model), params, batches)
    got = routing_pass(model, params, batches, keep_inputs=False) if ex.strategy != "dropless" else ref
    s = got.stats
    computed = s["kept"] + s["padded"] + s["fallback"]
    calls = ([p.expert_calls(ex.exact_overflow) for p in ex.plans] if ex.capacity_bound
             else [1] * len(model.cfg.moe_layer_ids()))
    out = {"moe/val_loss": got.loss, "moe/dropless_val_loss": ref.loss,
           "moe/val_loss_change_pct": 100 * (got.loss - ref.loss) / ref.loss,
           "moe/accuracy": 100 * got.accuracy, "moe/dropless_accuracy": 100 * ref.accuracy,
           "moe/accuracy_change": 100 * (got.accuracy - ref.accuracy),
           "moe/drop_pct": 100 * s["dropped"] / max(s["routed"], 1) if ex.capacity_bound else 0.0,
           "moe/padding_pct": 100 * s["padded"] / max(computed, 1) if ex.capacity_bound else 0.0,
           "moe/fallback_pct": 100 * s["fallback"] / max(s["routed"], 1) if ex.capacity_bound else 0.0,
           "moe/calls_per_layer": float(np.mean(calls)),
           "moe/imbalance": float(np.mean([imbalance_ratio(np.bincount(i.ravel(), minlength=model.cfg.moe_experts))
                                           for i in ref.ids]))}
    if time_batches and ex.capacity_bound:
        timed = routing_pass(model, params, batches[:time_batches], keep_inputs=True)
        out["moe/ms_per_token"] = 1e3 * latency_per_token(model, params, timed.inputs)
    return out
