"""The trace a cache run replays: read (or generate) it and split it by sequences into a part ScoutGate
trains on and a later part every policy is simulated on."""
from __future__ import annotations

import dataclasses

import numpy as np

from edge_jax.config import ConfigError
from edge_jax.data.routing_trace import RoutingTrace, read_trace


def trace_path(c) -> str:
    """``trace.path`` with ``{seed}`` replaced by the run's seed (one trace per seed's model)."""
    return c.trace.path.replace("{seed}", str(c.seed))


def load_trace(c) -> RoutingTrace:
    """The whole trace of config ``c``: the file (one-line TraceError if missing, truncated or of another
    version) or the seeded synthetic one."""
    if c.trace.source == "synthetic":
        from edge_jax.papers.expert_cache.synthetic import synthetic_routing
        s = c.synthetic
        try:
            return synthetic_routing(s.n_tokens, s.n_layers, s.n_experts, s.top_k, seed=c.seed, vocab=s.vocab,
                                     d_embed=s.d_embed, zipf=s.zipf, token_affinity=s.token_affinity,
                                     temperature=s.temperature, burst_rate=s.burst_rate, burst_len=s.burst_len,
                                     burst_boost=s.burst_boost, phase_tokens=s.phase_tokens)
        except ValueError as e:
            raise ConfigError(f"synthetic trace: {e}") from None
    return read_trace(trace_path(c))


def span(trace: RoutingTrace, first_seq: int, last_seq: int, max_tokens: int = 0) -> RoutingTrace:
    """Sequences [first_seq, last_seq) of ``trace`` as a trace of their own, cut after ``max_tokens``
    tokens when positive."""
    bounds = list(trace.seq_starts) + [trace.n_tokens]
    lo, hi = int(bounds[first_seq]), int(bounds[last_seq])
    if max_tokens:
        hi = min(hi, lo + max_tokens)
    starts = np.asarray(trace.seq_starts[first_seq:last_seq], np.int64) - lo
    return dataclasses.replace(trace, tokens=trace.tokens[lo:hi], experts=trace.experts[lo:hi],
                               probs=None if trace.probs is None else trace.probs[lo:hi],
                               seq_starts=starts[starts < hi - lo], meta={**trace.meta, "span_tokens": [lo, hi]})


def split_trace(trace: RoutingTrace, eval_fraction: float, max_tokens: int = 0) -> tuple[RoutingTrace, RoutingTrace]:
    """(train, eval): the first sequences for ScoutGate, the last ``eval_fraction`` of them (at least one
    each) to simulate, capped at ``max_tokens`` tokens when positive."""
    n_seqs = len(trace.seq_starts)
    if n_seqs < 2:
        raise ConfigError(f"the trace has {n_seqs} sequence(s); a train/eval split needs at least 2")
    cut = min(max(1, int(round(n_seqs * (1 - eval_fraction)))), n_seqs - 1)
    return span(trace, 0, cut), span(trace, cut, n_seqs, max_tokens)
