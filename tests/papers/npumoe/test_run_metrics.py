"""NPUMoE's run metrics and calibration (edge_jax.papers.npumoe.run_metrics) on a one-layer MoE model with random
weights and random batches: the strategy's loss, accuracy, drop and padding against a forward pass and token-copy
counts computed here chunk by chunk; overflow run exactly costs nothing; dropless against itself; calibration's
loads, plan, Overlap@K and files against counts of the routing computed here. The end-to-end path (a trained
model, the data pipeline, the CLI): test_moe_cli.py."""
import dataclasses
import functools
import json
import math

import jax
import numpy as np
import pytest
from conftest import tiny_overrides
from helpers import random_decoder_params

from edge_jax.config import load_config
from edge_jax.layers.moe.plan import MoEExec
from edge_jax.models import DecoderLM
from edge_jax.papers.npumoe import run_metrics as rm
from edge_jax.papers.npumoe.calibrate import overlap_summary, read_calibration
from edge_jax.train.setup import build

E, K, CHUNK, CAP, GROUP, B, T = 8, 2, 48, 6, 4, 2, 32  # per batch B*T = 64 tokens: chunks of 48 and 16 (+32 invalid)
MOE = {"model.n_layers": 1, "model.moe_experts": E, "model.moe_top_k": K, "model.moe_d_ff": 32,
       "model.moe_aux_weight": 0.0, "moe.strategy": "uniform", "moe.chunk": CHUNK, "moe.capacity": CAP,
       "moe.group": GROUP, "moe.calib_batches": 1, "data.seq_len": T, "data.batch_size": B}


@functools.lru_cache(maxsize=None)
def _forward(model):
    """(logits, top-k ids of every token) of ``model``'s one MoE layer: model.apply with the routing sown."""
    def fwd(params, tokens):
        logits, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
        return logits, state["intermediates"]["layers_0"]["moe"]["routing"][0]["ids"]
    return jax.jit(fwd)


def _batches(run, params, seed, n=2):
    """Random tokens; half the targets the dropless model's argmax (so accuracy is no constant 0), a padded tail."""
    rng = np.random.default_rng(seed)
    fwd = _forward(rm.dropless_model(run.model))
    out = []
    for i in range(n):
        inputs = rng.integers(1, 256, (B, T)).astype(np.int32)
        best = np.asarray(fwd(params, inputs)[0]).argmax(-1)
        targets = np.where(rng.random((B, T)) < 0.5, best, rng.integers(1, 256, (B, T))).astype(np.int32)
        mask = np.ones((B, T), np.float32)
        mask[-1, T - 3 - i:] = 0
        out.append({"inputs": inputs, "targets": targets, "mask": mask})
    return out


def _loss_accuracy(model, params, batches):
    fwd = _forward(model)
    nll = hit = tokens = 0.0
    for b in batches:
        logits = np.asarray(fwd(params, b["inputs"])[0], np.float64)
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        nll -= (np.take_along_axis(logp, b["targets"][..., None], -1)[..., 0] * b["mask"]).sum()
        hit += ((logits.argmax(-1) == b["targets"]) * b["mask"]).sum()
        tokens += b["mask"].sum()
    return nll / tokens, hit / tokens


def _copy_counts(ids_per_batch):
    """Token copies over every prefill chunk (each batch's B*T tokens in order; the mask does not route): routed,
    kept = sum_e min(load, CAP), over CAP, and the buffer's empty rows E * CAP - kept."""
    c = dict(routed=0, kept=0, over=0, padded=0)
    for ids in ids_per_batch:
        flat = np.asarray(ids).reshape(-1, K)
        for start in range(0, len(flat), CHUNK):
            load = np.bincount(flat[start:start + CHUNK].ravel(), minlength=E)
            c["routed"] += int(load.sum())
            c["kept"] += int(np.minimum(load, CAP).sum())
            c["over"] += int(np.maximum(load - CAP, 0).sum())
            c["padded"] += E * CAP - int(np.minimum(load, CAP).sum())
    return c


@pytest.fixture(scope="module")
def tiny():
    run = build(load_config("configs/npumoe.py", tiny_overrides(**MOE)))
    params = random_decoder_params(run.model.cfg, seed=3)
    return run, params, _batches(run, params, seed=4)


def test_other_dataset_and_dropless_model(tiny):
    assert rm.other_dataset("facts") == "pystdlib" and rm.other_dataset("pystdlib") == "facts"
    assert rm.other_dataset("some_corpus") == "facts"
    run = tiny[0]
    ex = run.model.cfg.moe_exec
    assert ex.strategy == "uniform" and len(ex.plans) == 1 and ex.plans[0].capacity == (CAP,) * E
    ref = rm.dropless_model(dataclasses.replace(run.model, cfg=dataclasses.replace(
        run.model.cfg, moe_exec=dataclasses.replace(ex, overflow="fallback"))))
    assert ref.cfg.moe_exec == MoEExec("dropless", CHUNK, ex.drop)  # no plans, overflow dropped (none is)
    assert dataclasses.replace(ref.cfg, moe_exec=ex) == run.model.cfg


def test_eval_batches_reads_the_named_dataset(tiny, monkeypatch):
    run = tiny[0]
    seen = []
    monkeypatch.setattr(rm, "make_eval_batches", lambda data, tok, split, n: seen.append((data, tok, split, n)))
    rm.eval_batches(run, "facts", "validation", 3)
    data, tok, split, n = seen[0]
    assert (data.name, tok, split, n) == ("facts", run.tokenizer, "validation", 3)
    assert {**data.to_dict(), "name": run.config.data.name} == run.config.data.to_dict()
    assert run.config.data.name == "pystdlib"  # the run's own config is left as it was


def test_strategy_metrics_against_counts_and_a_forward(tiny):
    """The one MoE layer routes the same under any strategy (its input comes before it), so the dropless forward's
    routing gives the strategy's token copies."""
    run, params, batches = tiny
    out = rm.moe_metrics(run, params, batches)
    ref = rm.dropless_model(run.model)
    ref_loss, ref_acc = _loss_accuracy(ref, params, batches)
    assert 0.2 < ref_acc < 0.8 and out["moe/val_loss"] != ref_loss  # the drops change the loss
    assert out["moe/dropless_val_loss"] == pytest.approx(ref_loss, rel=1e-5)
    assert out["moe/dropless_accuracy"] == pytest.approx(100 * ref_acc)
    assert out["moe/val_loss_change_pct"] == pytest.approx(
        100 * (out["moe/val_loss"] - ref_loss) / ref_loss, rel=1e-3)
    assert out["moe/accuracy_change"] == pytest.approx(out["moe/accuracy"] - 100 * ref_acc, abs=1e-4)  # float32
    ids = [_forward(ref)(params, b["inputs"])[1] for b in batches]
    c = _copy_counts(ids)
    assert c["over"] > 0 and c["padded"] > 0
    assert out["moe/drop_pct"] == pytest.approx(100 * c["over"] / c["routed"])
    assert out["moe/padding_pct"] == pytest.approx(100 * c["padded"] / (c["kept"] + c["padded"]))
    assert out["moe/fallback_pct"] == 0 and out["moe/calls_per_layer"] == E // GROUP
    real = np.concatenate([np.asarray(i)[b["mask"] > 0] for i, b in zip(ids, batches)])
    load = np.bincount(real.ravel(), minlength=E)
    assert out["moe/imbalance"] == pytest.approx(load.max() / load.mean())
    assert "moe/ms_per_token" not in out


def test_overflow_run_exactly_drops_nothing_and_keeps_the_dropless_loss(tiny):
    run, params, batches = tiny
    ex = run.model.cfg.moe_exec
    exact = dataclasses.replace(run, model=DecoderLM(dataclasses.replace(
        run.model.cfg, moe_exec=dataclasses.replace(ex, overflow="fallback"))))
    out = rm.moe_metrics(exact, params, batches)
    c = _copy_counts([_forward(rm.dropless_model(run.model))(params, b["inputs"])[1] for b in batches])
    assert out["moe/drop_pct"] == 0 and out["moe/fallback_pct"] == pytest.approx(100 * c["over"] / c["routed"])
    assert out["moe/val_loss"] == pytest.approx(out["moe/dropless_val_loss"], rel=1e-5)
    assert out["moe/calls_per_layer"] == E // GROUP + 1  # the groups and the exact path


def test_a_capacity_strategy_is_timed_on_its_first_batches(tiny, monkeypatch):
    run, params, batches = tiny
    seen, timed = [], rm.latency_per_token
    monkeypatch.setattr(rm, "latency_per_token", lambda model, params_, inputs: seen.append(
        (model, inputs)) or timed(model, params_, inputs, repeats=2))
    out = rm.moe_metrics(run, params, batches, time_batches=1)
    (model, inputs), = seen
    assert model is run.model and len(inputs) == 1  # time_batches=1: the first batch, its one MoE layer
    x, ids = inputs[0][0][:2]
    np.testing.assert_array_equal(ids, np.asarray(_forward(rm.dropless_model(run.model))(
        params, batches[0]["inputs"])[1]).reshape(-1, K))
    assert x.shape == (B * T, run.model.cfg.d_model)
    assert math.isfinite(out["moe/ms_per_token"]) and out["moe/ms_per_token"] > 0


def test_dropless_against_itself(tiny):
    run, params, batches = tiny
    ref = dataclasses.replace(run, model=rm.dropless_model(run.model))
    out = rm.moe_metrics(ref, params, batches, time_batches=1)
    assert out["moe/val_loss"] == out["moe/dropless_val_loss"] and out["moe/val_loss_change_pct"] == 0
    assert out["moe/drop_pct"] == out["moe/padding_pct"] == out["moe/fallback_pct"] == 0
    assert out["moe/calls_per_layer"] == 1 and "moe/ms_per_token" not in out  # timed for capacity strategies only


def test_calibration_loads_plan_overlap_and_files(tiny, monkeypatch, tmp_path, capsys):
    """Capacity 0: the plan takes the busiest expert's rows, ceil(imbalance x base), base = ceil(48 * 2 / 8)."""
    run, params, _ = tiny
    run = build(load_config("configs/npumoe.py", tiny_overrides(**{**MOE, "moe.capacity": 0, "train.steps": 0,
                                                                   "init_from": str(tmp_path / "base")})))
    assert not run.model.cfg.moe_exec.plans  # nothing calibrated yet
    sets = {("pystdlib", "train"): 5, ("pystdlib", "validation"): 6, ("facts", "validation"): 7}
    asked = []

    def fake_eval_batches(run_, name, split, n):
        asked.append((name, split, n))
        return _batches(run, params, sets[name, split], n)

    monkeypatch.setattr(rm, "eval_batches", fake_eval_batches)
    cal = rm.calibrate(run, params, batches=2)
    assert sorted(asked) == sorted((name, split, 2) for name, split in sets)

    fwd = _forward(rm.dropless_model(run.model))

    def loads(seed, n=2):
        bs = _batches(run, params, seed, n)
        real = np.concatenate([np.asarray(fwd(params, b["inputs"])[1])[b["mask"] > 0] for b in bs])
        return np.bincount(real.ravel(), minlength=E)[None], int(sum(b["mask"].sum() for b in bs))

    (cal_load, tokens), (held, _), (cross, _) = (loads(s) for s in sets.values())
    np.testing.assert_array_equal(cal["loads"], cal_load)
    assert cal["meta"] == {"data": "pystdlib", "second": "facts", "batches": 2, "tokens": tokens}
    want = {**{f"heldout_{k}": v for k, v in overlap_summary(cal_load, held, (4, 8)).items()},
            **{f"cross_{k}": v for k, v in overlap_summary(cal_load, cross, (4, 8)).items()}}
    assert cal["overlap"] == want and want["heldout_overlap@8_mean"] == 1.0  # K = E: every expert is in both
    busiest = math.ceil(cal_load.max() / cal_load.mean() * math.ceil(CHUNK * K / E))
    assert busiest > math.ceil(CHUNK * K / E)
    assert cal["plans"][0].capacity == (busiest,) * E and cal["model"].cfg.moe_exec.plans == cal["plans"]

    # calibrate_run: moe.calib_batches (1) batches, no Overlap@K, the files in the workdir
    new_run, cal1 = rm.calibrate_run(run, params, str(tmp_path))
    load1, tokens1 = loads(5, 1)
    assert new_run.model is cal1["model"] and new_run.config is run.config and cal1["overlap"] is None
    assert f"calibrated 1 MoE layers on {tokens1:,} tokens" in capsys.readouterr().out
    np.testing.assert_array_equal(read_calibration(tmp_path / "calibration.json", 1, E).loads, load1)
    assert json.loads((tmp_path / "calibration.json").read_text())["meta"]["tokens"] == tokens1
    assert (tmp_path / "calibration.md").read_text().strip()
