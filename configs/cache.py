"""Two-tier MoE expert cache: replay a routing trace under one policy and capacity.

    edge-jax cache run --config configs/cache.py --workdir /tmp/cache                  # real trace, watermark, 20% VRAM
    edge-jax cache run --config configs/cache.py:policy=lru,vram=0.3 --workdir /tmp/lru
    edge-jax cache run --config configs/cache.py:trace=synthetic,policy=belady --workdir /tmp/bel

Arguments: trace (real: the committed routing trace of the NPUMoE tiny model of the run's seed,
results/npumoe_traces/seed{seed}/pystdlib_validation.npz, 65,536 held-out tokens, 4 MoE layers x top-2
of 16 experts; synthetic: a seeded trace of the same shape with Zipf popularity, bursts and phase
shifts), policy (fifo, lru, lfu, ewma, scoutgate, watermark, belady, none), vram and ram (fractions of
all experts' bytes; RAM fixed at 0.6 in the grids), profile (pcie4-nvme, phone). Every key of
edge_jax/papers/expert_cache/config.py can be overridden with --config.KEY=VALUE.
"""
from edge_jax.config import parse_arg
from edge_jax.papers.expert_cache.config import base_config

REAL_TRACE = "results/npumoe_traces/seed{seed}/pystdlib_validation.npz"


def get_config(arg=None):
    a = parse_arg(arg, trace="real", policy="watermark", vram=0.2, ram=0.6, profile="pcie4-nvme")
    c = base_config()
    if a.trace == "real":
        c.trace.source, c.trace.path = "file", REAL_TRACE
    elif a.trace == "synthetic":
        c.trace.source = "synthetic"
        c.synthetic.d_embed = 128   # as wide as the real trace's embeddings, so ScoutGate sees the same shape
    else:
        from edge_jax.config import ConfigError
        raise ConfigError(f"unknown trace {a.trace!r}; valid: real, synthetic")
    c.cache.policy, c.cache.vram_fraction, c.cache.ram_fraction = a.policy, a.vram, a.ram
    c.profile.preset = a.profile
    return c
