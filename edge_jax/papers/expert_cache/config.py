"""The expert-cache config schema (``task = "cache_sim"``): trace, device profile, capacities, policy,
predictor and ScoutGate settings. ``edge_jax.config.load_config`` loads it like any config file (the
``task`` key picks this schema) and ``edge-jax cache run`` / ``edge-jax grid`` run it.

Policies: ``fifo``, ``lru``, ``lfu`` (demand fetch), ``ewma`` and ``scoutgate`` (the watermark controller
driven by EWMA alone, η = 0, or ScoutGate alone, η = 1), ``watermark`` (fused with ``predictor.eta``),
``watermark_pop`` (the same with RAM ranked by long-run popularity),
``belady`` (the offline bound), and ``none`` (no simulation: only train and score ScoutGate, the grid stage
that cells share).
"""
from __future__ import annotations

import ml_collections

from edge_jax.errors import ConfigError, unknown
from edge_jax.papers.expert_cache.engine import CACHE_POLICIES, CachePolicy
from edge_jax.registry import CONFIG_TASKS, ConfigTask

TASK = "cache_sim"
SOURCES = ("file", "synthetic")
# No simulation: only train and score ScoutGate (the stage the grid's cells share).
CACHE_POLICIES.register("none", CachePolicy(scout=lambda c: True))


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.task = TASK
    c.seed = 0
    # The routing trace: a file written by `edge-jax moe trace` ("{seed}" in the path becomes the run's
    # seed) or a synthetic one. The last eval_fraction of its sequences is simulated; ScoutGate trains on
    # the rest. max_tokens > 0 caps the simulated tokens.
    c.trace = ml_collections.ConfigDict(dict(source="file", path="", eval_fraction=0.5, max_tokens=0))
    c.synthetic = ml_collections.ConfigDict(dict(
        n_tokens=65536, n_layers=4, n_experts=16, top_k=2, vocab=256, d_embed=32, zipf=1.1, token_affinity=1.0,
        temperature=1.0, burst_rate=1 / 2048, burst_len=256, burst_boost=3.0, phase_tokens=16384))
    # Device profile (edge_jax.papers.expert_cache.profile): 0 takes the preset's value (compute_ms: negative);
    # n_layers / n_experts 0 take the trace's, otherwise they must match it.
    c.profile = ml_collections.ConfigDict(dict(
        preset="pcie4-nvme", expert_bytes=0, vram_gbps=0.0, nvme_gbps=0.0, vram_latency_us=0.0, nvme_latency_us=0.0,
        compute_ms=-1.0, n_layers=0, n_experts=0, size_spread=0.0))
    # Capacities as fractions of all experts' bytes.
    c.cache = ml_collections.ConfigDict(dict(policy="watermark", vram_fraction=0.2, ram_fraction=0.6))
    # Watermark policy (§4): EWMA rate alpha and prior p0 (negative: k / E), fusion eta, reuse decay gamma,
    # watermark step size (unit-free, see edge_jax.papers.expert_cache.watermark) and hysteresis.
    # watermark_pop (edge_jax.papers.expert_cache.watermark_pop): RAM ranked by a slow EWMA (pop_alpha) plus
    # pop_mix x the fused probability; its own reuse decay pop_gamma.
    c.predictor = ml_collections.ConfigDict(dict(alpha=0.02, p0=-1.0, eta=0.5, gamma=0.5, watermark_step=0.05,
                                                 hysteresis=0.1, pop_alpha=0.001, pop_mix=0.3, pop_gamma=0.0))
    # ScoutGate (§4.2): from_dir = a workdir where it was trained (policy none); empty trains it here.
    c.scoutgate = ml_collections.ConfigDict(dict(
        from_dir="", m=8, d_proj=128, d_layer=32, d_expert=32, d_rank=64, d_hidden=0, steps=1500, batch=256,
        lr=3e-3, weight_decay=1e-4, card_weight=0.1))
    return c


def needs_scout(c) -> bool:
    return CACHE_POLICIES.get(c.cache.policy).scout(c)


def validate(c) -> None:
    """One-line ConfigError for values and combinations that cannot run."""
    CACHE_POLICIES.check(c.cache.policy)
    if c.trace.source not in SOURCES:
        raise ConfigError(unknown("trace.source value", c.trace.source, SOURCES))
    if c.trace.source == "file" and not c.trace.path:
        raise ConfigError("trace.path is empty; pass a trace file (edge-jax moe trace --workdir W --out DIR) or "
                          "set trace.source=synthetic")
    if not 0 < c.trace.eval_fraction < 1:
        raise ConfigError(f"trace.eval_fraction must be in (0, 1), got {c.trace.eval_fraction}")
    if c.trace.max_tokens < 0:
        raise ConfigError(f"trace.max_tokens must be >= 0 (0: all), got {c.trace.max_tokens}")
    p = c.predictor
    if not 0.0 <= p.eta <= 1.0:
        raise ConfigError(f"predictor.eta must be in [0, 1] (0: EWMA only, 1: ScoutGate only), got {p.eta}")
    if not 0.0 < p.alpha <= 1.0:
        raise ConfigError(f"predictor.alpha must be in (0, 1], got {p.alpha}")
    if p.p0 > 1.0:
        raise ConfigError(f"predictor.p0 must be <= 1 (negative: k / E), got {p.p0}")
    if p.gamma < 0 or p.watermark_step < 0:
        raise ConfigError(f"predictor.gamma and predictor.watermark_step must be >= 0, got {p.gamma}, "
                          f"{p.watermark_step}")
    if not 0.0 <= p.hysteresis < 1.0:
        raise ConfigError(f"predictor.hysteresis must be in [0, 1), got {p.hysteresis}")
    if not 0.0 < p.pop_alpha <= 1.0 or p.pop_mix < 0 or p.pop_gamma < 0:
        raise ConfigError(f"need predictor.pop_alpha in (0, 1], pop_mix >= 0 and pop_gamma >= 0; got {p.pop_alpha}, "
                          f"{p.pop_mix}, {p.pop_gamma}")
    s = c.scoutgate
    for key in ("m", "d_proj", "d_layer", "d_expert", "d_rank", "steps", "batch"):
        if s[key] <= 0:
            raise ConfigError(f"scoutgate.{key} must be positive, got {s[key]}")
    if s.from_dir and c.cache.policy == "none":
        raise ConfigError("cache.policy=none trains ScoutGate; drop scoutgate.from_dir or pick a policy")


CONFIG_TASKS.register(TASK, ConfigTask(schema=base_config, validate=validate))
