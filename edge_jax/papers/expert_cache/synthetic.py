"""Seeded synthetic MoE routing traces with the structure an expert cache (and its predictor) sees.

Generative model, for N tokens, L MoE layers, E experts and J = top-k experts per token:

* **tokens**: ids drawn i.i.d. from a Zipf(1) law over a randomly permuted vocabulary of V ids,
  cut into sequences at random points (the first sequence starts at 0);
* **embeddings**: a frozen table ``X ~ N(0, 1)`` of shape [V, D] and a router matrix per layer
  ``R_l ~ N(0, 1/D)`` of shape [D, E];
* **popularity**: each layer ranks its experts by a random permutation of the Zipf log-popularity
  ``-zipf * log(rank)``; at phase shifts (each token after the first starts one with probability
  ``1/phase_tokens``) every layer moves a random half of its experts to each other's ranks;
* **bursts**: each token starts a burst with probability ``burst_rate``; for the next ``burst_len``
  tokens, 1-2 random experts in each of a random subset of layers get ``+burst_boost``;
* **router logits** of token i at layer l::

      log_pop_l[phase(i)] + token_affinity * (X[t_i] + 0.5 * X[t_{i-1}]) @ R_l + bursts_l(i)
          + temperature * Gumbel

  where the previous-token term is dropped at a sequence start. The top-k logits (best first) give
  ``experts``, and the softmax over all E logits at those experts gives ``probs``.

So routing is skewed, predictable from the current and previous token, bursty, and drifts over
time. Noise is drawn in chunks of tokens, so memory stays bounded for million-token traces.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from edge_jax.data.routing_trace import RoutingTrace

_CHUNK_ELEMS = 1 << 21   # router logits generated per chunk (tokens x layers x experts)
_PREV_WEIGHT = 0.5       # weight of the previous token's embedding in the router input
_TOKEN_ZIPF = 1.0        # Zipf exponent of token frequencies


def _bad(name: str, want: str, got) -> ValueError:
    return ValueError(f"synthetic_routing: {name} must be {want}, got {got!r}")


def _int(name: str, value, lo: int, hi: int | None = None, hi_name: str = "") -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise _bad(name, "an integer", value) from None
    if v < lo or (hi is not None and v > hi):
        top = f"{hi_name}={hi}" if hi_name else hi
        raise _bad(name, f"in [{lo}, {top}]" if hi is not None else f">= {lo}", value)
    return int(v)


def _real(name: str, value, lo: float, hi: float | None = None) -> float:
    try:
        if isinstance(value, bool):
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        raise _bad(name, "a real number", value) from None
    if not math.isfinite(v) or v < lo or (hi is not None and v > hi):
        raise _bad(name, f"finite and in [{lo}, {hi}]" if hi is not None else f"finite and >= {lo}",
                   value)
    return v


def _top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries along the last axis, best first (ties: lowest index)."""
    if k > 4:
        return np.argsort(-logits, axis=-1, kind="stable")[..., :k]
    work, out = logits.copy(), np.empty(logits.shape[:-1] + (k,), np.int64)
    for j in range(k):  # repeated argmax beats a full sort for small k
        out[..., j] = best = np.argmax(work, axis=-1)
        np.put_along_axis(work, best[..., None], -np.inf, axis=-1)
    return out


def synthetic_routing(n_tokens: int = 65536, n_layers: int = 4, n_experts: int = 16, top_k: int = 2,
                      *, seed: int = 0, vocab: int = 256, d_embed: int = 32, n_seqs: int = 0,
                      zipf: float = 1.1, token_affinity: float = 1.0, temperature: float = 1.0,
                      burst_rate: float = 1 / 2048, burst_len: int = 256, burst_boost: float = 3.0,
                      phase_tokens: int = 16384) -> RoutingTrace:
    """A deterministic (per `seed`) synthetic routing trace; see the module docstring for the model.

    Args:
      n_tokens: tokens N (>= 1). n_layers: MoE layers L (>= 1), recorded as layers 0..L-1.
      n_experts: experts per layer E, in [1, 32767]. top_k: experts per token and layer, in [1, E].
      seed: numpy ``default_rng`` seed (>= 0); same arguments and seed give identical arrays.
      vocab: vocabulary size V (>= 1, default 256). d_embed: embedding width D (>= 1, default 32).
      n_seqs: number of sequences, in [0, N]; 0 (default) means ``max(1, N // 256)``.
      zipf: Zipf exponent of expert popularity (>= 0, default 1.1: with 16 experts the most
        popular expert is ~15x as likely as the least, roughly the skew of trained MoE routers).
      token_affinity: scale of the token-dependent router term (>= 0, default 1.0, which makes it
        about as large as the popularity spread so routing is clearly, not fully, token-determined;
        0 makes routing independent of the tokens).
      temperature: scale of the Gumbel noise (>= 0, default 1.0: top-k is then a draw without
        replacement from the softmax of the noiseless logits; 0 is deterministic given the token).
      burst_rate: probability that a token starts a burst, in [0, 1] (default 1/2048: about one
        burst in flight at a time with the default `burst_len`).
      burst_len: tokens a burst lasts (>= 1, default 256: a paragraph-length topical episode).
      burst_boost: logit boost of a burst's experts (>= 0, default 3.0: a boosted expert becomes
        ~20x as likely, enough to displace the popular ones for the burst).
      phase_tokens: mean tokens between phase shifts (>= 0; 0 = never; default 16384, so a 64k-token
        trace sees about four popularity reshuffles). Each shift costs a small [L, E] table and a
        Python step, so keep ``n_tokens / phase_tokens`` well below ~1e5.

    Returns a validated :class:`~edge_jax.data.routing_trace.RoutingTrace` with ``embeddings = X`` and
    ``meta`` holding ``"source": "synthetic"``, every argument (``n_seqs`` resolved, so
    ``synthetic_routing(**params)`` reproduces it) and the counts ``n_bursts`` and
    ``n_phase_shifts``. Raises a one-line ValueError naming any out-of-range argument.
    """
    n = _int("n_tokens", n_tokens, 1)
    n_layers = _int("n_layers", n_layers, 1)
    e = _int("n_experts", n_experts, 1, np.iinfo(np.int16).max)
    k = _int("top_k", top_k, 1, e, "n_experts")
    seed = _int("seed", seed, 0)
    vocab = _int("vocab", vocab, 1)
    d_embed = _int("d_embed", d_embed, 1)
    n_seqs = _int("n_seqs", n_seqs, 0, n, "n_tokens") or max(1, n // 256)
    zipf = _real("zipf", zipf, 0.0)
    token_affinity = _real("token_affinity", token_affinity, 0.0)
    temperature = _real("temperature", temperature, 0.0)
    burst_rate = _real("burst_rate", burst_rate, 0.0, 1.0)
    burst_len = _int("burst_len", burst_len, 1)
    burst_boost = _real("burst_boost", burst_boost, 0.0)
    phase_tokens = _int("phase_tokens", phase_tokens, 0)
    params = dict(n_tokens=n, n_layers=n_layers, n_experts=e, top_k=k, seed=seed, vocab=vocab,
                  d_embed=d_embed, n_seqs=n_seqs, zipf=zipf, token_affinity=token_affinity,
                  temperature=temperature, burst_rate=burst_rate, burst_len=burst_len,
                  burst_boost=burst_boost, phase_tokens=phase_tokens)
    rng = np.random.default_rng(seed)

    # Tokens, sequences, embeddings and per-layer token scores T[v, l] = X[v] @ R_l.
    x = rng.standard_normal((vocab, d_embed), dtype=np.float32)
    r = rng.standard_normal((n_layers, d_embed, e), dtype=np.float32) / np.float32(math.sqrt(d_embed))
    scores = np.einsum("vd,lde->vle", x, r).astype(np.float32) * np.float32(token_affinity)
    token_p = np.arange(1, vocab + 1, dtype=np.float64) ** -_TOKEN_ZIPF
    token_p = rng.permutation(token_p / token_p.sum())
    tokens = rng.choice(vocab, size=n, p=token_p).astype(np.int32)
    cuts = np.sort(rng.choice(n - 1, size=n_seqs - 1, replace=False) + 1) if n_seqs > 1 else []
    seq_starts = np.concatenate([[0], cuts]).astype(np.int64)
    prev_tokens = np.concatenate([[0], tokens[:-1]]).astype(np.int32)
    prev_tokens[seq_starts] = 0
    prev_weight = np.ones(n, np.float32) * np.float32(_PREV_WEIGHT)
    prev_weight[seq_starts] = 0.0   # no previous token at a sequence start

    # Popularity per phase: [phases, L, E] log-popularity, each phase a partial reshuffle of the last.
    base = (-zipf * np.log(np.arange(1, e + 1))).astype(np.float32)
    shifts = np.flatnonzero(rng.random(n - 1) < 1 / phase_tokens) + 1 if phase_tokens else np.zeros(0, int)
    ranks = np.empty((len(shifts) + 1, n_layers, e), np.int64)
    ranks[0] = np.argsort(rng.random((n_layers, e)), axis=-1)
    half = max(2, e // 2)
    if len(shifts) and e >= 2:
        movers = np.argsort(rng.random((len(shifts), n_layers, e)), axis=-1)[..., :half]
        rows = np.arange(n_layers)[:, None]
        for p in range(1, len(ranks)):
            ranks[p] = ranks[p - 1]
            ranks[p][rows, movers[p - 1]] = ranks[p - 1][rows, np.roll(movers[p - 1], 1, axis=-1)]
    log_pop = base[ranks]

    # Bursts: start positions and a [bursts, L, E] boost (1-2 experts in each of a random subset of layers).
    b_start = np.flatnonzero(rng.random(n) < burst_rate)
    nb = len(b_start)
    layer_on = rng.random((nb, n_layers)) < 0.5
    layer_on[np.arange(nb), rng.integers(0, n_layers, nb)] = True
    pick = np.argsort(rng.random((nb, n_layers, e)), axis=-1)[..., :2]
    n_pick = rng.integers(1, min(2, e) + 1, (nb, n_layers))
    boost = np.zeros((nb, n_layers, e), np.float32)
    for j in range(min(2, e)):
        on = layer_on & (n_pick > j)
        np.put_along_axis(boost, pick[..., j:j + 1], (burst_boost * on)[..., None].astype(np.float32), -1)
    b_stop = b_start + burst_len
    # Popularity and burst boosts are constant between events: tabulate them per segment.
    events = np.unique(np.concatenate([[0], shifts, b_start, b_stop[b_stop < n]]))

    experts = np.empty((n, n_layers, k), np.int16)
    probs = np.empty((n, n_layers, k), np.float32)
    chunk = max(1, _CHUNK_ELEMS // (n_layers * e))
    tiny = np.finfo(np.float32).tiny
    for a in range(0, n, chunk):
        z = min(n, a + chunk)
        segs = events[np.searchsorted(events, a, side="right") - 1:np.searchsorted(events, z)]
        table = log_pop[np.searchsorted(shifts, segs, side="right")]
        live = (b_start < z) & (b_stop > a)
        if live.any():  # difference array over the segments, then a running sum
            diff = np.zeros((len(segs) + 1, n_layers, e), np.float32)
            np.add.at(diff, np.searchsorted(segs, np.maximum(b_start[live], a), side="right") - 1,
                      boost[live])
            np.add.at(diff, np.searchsorted(np.append(segs, z), np.minimum(b_stop[live], z)),
                      -boost[live])
            table += np.cumsum(diff[:-1], axis=0)
        lengths = np.diff(np.append(np.maximum(segs, a), z))
        logits = np.repeat(table, lengths, axis=0)
        logits += scores[tokens[a:z]]
        logits += prev_weight[a:z, None, None] * scores[prev_tokens[a:z]]
        if temperature:
            u = np.maximum(rng.random(logits.shape, dtype=np.float32), tiny)
            logits -= np.float32(temperature) * np.log(-np.log(u))
        top = _top_k(logits, k)
        top_logits = np.take_along_axis(logits, top, axis=-1)
        m = top_logits[..., :1]
        experts[a:z] = top
        probs[a:z] = np.exp(top_logits - m) / np.exp(logits - m).sum(-1, keepdims=True)

    meta = {"source": "synthetic", **params, "n_bursts": int(nb), "n_phase_shifts": int(len(shifts))}
    return RoutingTrace(tokens=tokens, seq_starts=seq_starts, experts=experts, probs=probs,
                        layers=tuple(range(n_layers)), n_experts=e, top_k=k, embeddings=x,
                        meta=meta).validate()
