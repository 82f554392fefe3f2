"""One expert-cache run: trace -> profile and capacities -> (ScoutGate) -> policy -> metrics.

``run_experiment(config, workdir)`` is what ``edge-jax cache run`` and every ``edge-jax grid`` cell of a
cache ablation call (it is the runner registered for the ``cache_sim`` task). It writes ``config.json``
first and ``final_metrics.json`` last (both atomically; a run is finished when the latter exists) and,
when it trains ScoutGate, ``scoutgate.npz``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from edge_jax.data.routing_trace import RoutingTrace
from edge_jax.errors import ConfigError
from edge_jax.papers.expert_cache.config import TASK, needs_scout
from edge_jax.papers.expert_cache.engine import CACHE_POLICIES
from edge_jax.papers.expert_cache.inputs import load_trace, split_trace, trace_path
from edge_jax.papers.expert_cache.profile import build_profile, capacities, resolve
from edge_jax.registry import RUNNERS
from edge_jax.utils.atomic import write_json_atomic

SCOUT_FILE = "scoutgate.npz"


def make_policy(c, scout: np.ndarray | None):
    """The online policy ``cache.policy`` names (CACHE_POLICIES)."""
    return CACHE_POLICIES.get(c.cache.policy).make(c, scout)


def scout_config(c):
    from edge_jax.papers.expert_cache.scoutgate import ScoutGateConfig
    s = c.scoutgate
    return ScoutGateConfig(m=s.m, d_proj=s.d_proj, d_layer=s.d_layer, d_expert=s.d_expert, d_rank=s.d_rank,
                           d_hidden=s.d_hidden, steps=s.steps, batch=s.batch, lr=s.lr, weight_decay=s.weight_decay,
                           card_weight=s.card_weight)


def fingerprint(trace: RoutingTrace) -> str:
    """A short digest of a trace span's tokens and routing (which data ScoutGate was trained on)."""
    h = hashlib.sha1()
    for a in (trace.tokens, trace.seq_starts, trace.experts):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def scout_params(c, train: RoutingTrace, workdir: Path, log=print) -> tuple[object, dict]:
    """ScoutGate parameters: loaded from ``scoutgate.from_dir`` (checked to match this trace split and
    architecture) or trained on ``train`` and saved in ``workdir``."""
    from edge_jax.papers.expert_cache.scoutgate import load_params, save_params, train_scoutgate
    cfg = scout_config(c)
    want = {"train_fingerprint": fingerprint(train), "config": dataclasses.asdict(cfg)}
    if c.scoutgate.from_dir:
        path = Path(c.scoutgate.from_dir) / SCOUT_FILE
        if not path.is_file():
            raise ConfigError(f"scoutgate.from_dir: {path} not found; train one with cache.policy=none")
        params, meta = load_params(path)
        for key, value in want.items():
            if meta.get(key) != value:
                raise ConfigError(f"{path} was trained with another {key.replace('_', ' ')} than this run "
                                  f"(trace {trace_path(c)}, eval_fraction {c.trace.eval_fraction}); retrain it")
        return params, _train_metrics(meta.get("train_info", {}))
    params, info = train_scoutgate(train, cfg, seed=c.seed, log=log)
    save_params(workdir / SCOUT_FILE, params, {**want, "train_info": info})
    return params, _train_metrics(info)


def _train_metrics(info: dict) -> dict:
    return {f"scoutgate_train_{k}": info[k] for k in ("bce", "card", "steps", "wall_s") if k in info}


def ewma_probs(experts_NLJ: np.ndarray, n_experts: int, alpha: float, p0: float, compiled: bool = True) -> np.ndarray:
    """float32 [N, L, E]: each layer's EWMA just before that token's layer runs (what it predicts).
    ``compiled``: the numba loop (compiled_sim.ewma_history, the same numbers); False: this numpy loop."""
    n, L, k = experts_NLJ.shape
    out = np.empty((n, L, n_experts), np.float32)
    state = np.full((L, n_experts), p0 if p0 >= 0 else k / n_experts)
    if compiled:
        from edge_jax.papers.expert_cache.compiled_sim import ewma_history
        ewma_history(np.ascontiguousarray(experts_NLJ, np.int64), state, float(alpha), out)
        return out
    from edge_jax.papers.expert_cache.watermark import ewma_update
    rows = np.arange(L)[:, None]
    for i in range(n):
        out[i] = state
        ewma_update(state, (rows, experts_NLJ[i]), alpha)
    return out


_RECENT: dict = {}


def _recent(key, make):
    """``make()``, remembered for the two most recent keys: a grid runs its cells seed by seed in one process,
    and the cells of one seed and trace share the trace and ScoutGate's forecasts (at 1 M tokens, loading
    or generating the trace and forecasting take longer than simulating)."""
    if key not in _RECENT:
        while len(_RECENT) >= 2:
            _RECENT.pop(next(iter(_RECENT)))
        _RECENT[key] = make()
    return _RECENT[key]


def _trace_key(c) -> str:
    """What the trace of ``c`` depends on: the synthetic settings, or the file (its size and time too)."""
    if c.trace.source == "synthetic":
        return json.dumps({"seed": c.seed, **c.synthetic.to_dict()}, sort_keys=True)
    path = Path(trace_path(c))
    stat = path.stat() if path.is_file() else None
    return json.dumps([str(path.resolve()), stat and stat.st_size, stat and stat.st_mtime_ns])


def _scout_key(c):
    """What the forecasts of ``c`` depend on besides the trace, or None when ScoutGate is trained in the run."""
    if not c.scoutgate.from_dir:
        return None
    path = Path(c.scoutgate.from_dir) / SCOUT_FILE
    stat = path.stat() if path.is_file() else None
    return json.dumps([str(path.resolve()), stat and stat.st_size, stat and stat.st_mtime_ns,
                       c.trace.eval_fraction, c.trace.max_tokens, c.predictor.alpha, c.predictor.p0,
                       c.scoutgate.to_dict()], sort_keys=True)


@RUNNERS.register(TASK)
def run_experiment(c, workdir: str | Path, log=print) -> dict:
    """Run the expert-cache config ``c`` in ``workdir``; its metrics (what a grid cell records)."""
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    write_json_atomic(wd / "config.json", json.loads(json.dumps(c.to_dict(), default=str)))
    t0 = time.time()
    trace = _recent(("trace", _trace_key(c)), lambda: load_trace(c))
    profile = build_profile(c.profile, trace.n_layers, trace.n_experts, seed=c.seed)
    cap_g, cap_r = capacities(profile, c.cache.vram_fraction, c.cache.ram_fraction, trace.top_k)
    train, ev = split_trace(trace, c.trace.eval_fraction, c.trace.max_tokens)
    metrics: dict = {"trace_tokens": int(ev.n_tokens), "train_tokens": int(train.n_tokens),
                     "vram_experts": cap_g / profile.sizes.mean(), "ram_experts": cap_r / profile.sizes.mean(),
                     "expert_mb": float(profile.sizes.mean()) / 1e6,
                     "cost_g_ms": float(profile.cost_g.mean()) * 1e3, "cost_r_ms": float(profile.cost_r.mean()) * 1e3,
                     **{f"profile_{k}": v for k, v in resolve(c.profile).items()}}
    scout = None
    if needs_scout(c):
        from edge_jax.papers.expert_cache.scoutgate import predict, recall_at_k
        params, info = scout_params(c, train, wd, log)

        def forecast():
            probs = predict(params, ev, scout_config(c))
            ewma = ewma_probs(ev.experts, ev.n_experts, c.predictor.alpha, c.predictor.p0)
            return probs, {"scoutgate_recall_at_k": recall_at_k(probs, ev.experts),
                           "ewma_recall_at_k": recall_at_k(ewma, ev.experts),
                           "scoutgate_mean_sum_p": float(probs.sum(-1).mean())}
        key = _scout_key(c)
        scout, scores = forecast() if key is None else _recent(("scout", key, _trace_key(c)), forecast)
        metrics.update(info, **scores)
    entry = CACHE_POLICIES.get(c.cache.policy)
    if entry.offline is not None:
        stats, extra = entry.offline(ev.experts, profile, cap_g, cap_r)
        metrics.update(stats.metrics(), **extra)
    elif entry.make is not None:
        from edge_jax.papers.expert_cache.compiled_sim import simulate
        policy = make_policy(c, scout)
        metrics.update(simulate(ev.experts, profile, cap_g, cap_r, policy).metrics())
        if hasattr(policy, "lam"):
            metrics.update(final_lambda_vram=policy.lam["vram"], final_lambda_ram=policy.lam["ram"])
    metrics["wall_s"] = time.time() - t0
    write_json_atomic(wd / "final_metrics.json", metrics)
    if "stall_ms_per_token" in metrics:
        log(f"{c.cache.policy}: {metrics['stall_ms_per_token']:.3f} ms/token stall, VRAM hits "
            f"{metrics['vram_hit_pct']:.1f}%, RAM hits {metrics['ram_hit_pct']:.1f}%, "
            f"{metrics['accesses_per_s']:,.0f} accesses/s")
    return metrics
