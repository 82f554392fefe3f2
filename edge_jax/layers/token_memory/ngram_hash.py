"""Host-side n-gram hashing for the Engram baseline (Cheng et al. 2026, "Conditional memory via
scalable lookup"), numpy only, so that JAX never needs 64-bit integers.

For every position ``t``, n-gram order ``n`` in ``orders`` and hash head ``j < heads``::

    g_t^n    = (x_{t-n+1}, ..., x_t)                 the n-gram ending at t (causal)
    v(x)     = x for a real token, PAD_VALUE for a position before the sequence start
    mix      = XOR_{k<n} ( v(x_{t-k}) * m[n, j, k]  mod 2**64 )   multiplicative-XOR hash
    id[n, j] = (mix & (2**63 - 1)) mod p[n, j]  +  offset[n, j]

* ``m[n, j, k]``: odd 64-bit multipliers drawn once from ``np.random.default_rng(seed)``, one set per
  (order, head) (:func:`hash_multipliers`). The official Engram demo shares one multiplier per
  offset ``k`` across heads and tells heads apart only by their prime modulus; drawing separate
  multipliers per head as well makes the heads' collisions independent.
* Products wrap modulo 2**64 (``uint64`` arithmetic, well defined in numpy); the top bit is then
  masked so the value is a non-negative int64 before the modulo.
* ``p[n, j]``: distinct primes >= ``table_size``, order-major (:func:`engram_table_sizes`), like the
  demo's per-head prime table sizes; distinct moduli decorrelate the heads further.
* ``offset[n, j]``: running sum of the sizes before head (n, j), so all heads index ONE concatenated
  table of ``sum(sizes)`` rows (column ``i * heads + j`` of the output is order ``orders[i]``, head j).
* ``PAD_VALUE`` is a fixed 64-bit constant no token id (int32, >= 0) can equal, so a truncated
  n-gram at the start of a sequence is distinct from any full one.
* No tokenizer compression (the paper's canonical-id surjection): our tokenizers are byte/BPE level
  and the comparison in MeKi Table 2 is at equal ROM size, not equal vocabulary.

Vectorised over batch and positions (loops only over orders, heads and n); deterministic for a
given ``seed``; causal by construction: ids at ``t`` read tokens at ``<= t`` only.
"""
from __future__ import annotations

import functools

import numpy as np

PAD_VALUE = 0x9E3779B97F4A7C15  # golden-ratio constant, > 2**63 > any token id
MASK63 = (1 << 63) - 1


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def engram_table_sizes(orders, heads: int, table_size: int) -> tuple[int, ...]:
    """One distinct prime ``>= table_size`` per (order, head), order-major: the successive primes
    from ``table_size`` upwards (all orders share ``table_size``, so each order takes the next
    ``heads`` unused ones)."""
    return _table_sizes(tuple(int(n) for n in orders), int(heads), int(table_size))


@functools.lru_cache(maxsize=None)
def _table_sizes(orders: tuple, heads: int, table_size: int) -> tuple[int, ...]:
    if heads <= 0 or table_size < 2 or not orders:
        raise ValueError(f"need heads > 0, table_size >= 2 and some orders; got {heads}, {table_size}, {orders}")
    sizes, candidate = [], int(table_size)
    while len(sizes) < len(orders) * heads:
        if _is_prime(candidate):
            sizes.append(candidate)
        candidate += 1
    return tuple(sizes)


def matched_table_size(n_layers: int, vocab_size: int, n_engram_layers: int, orders, heads: int) -> int:
    """``table_size`` that gives Engram (``d_head = d_mem``) about the ROM of MeKi / PLE,
    ``n_layers * vocab_size * d_mem``: each Engram layer holds ``sum(sizes) * d_head`` values, so
    ``sum(sizes) ~ n_layers * vocab_size / n_engram_layers`` split over ``len(orders) * heads`` heads
    (the primes above it add well under 1% for tables of thousands of rows)."""
    return max(2, round(n_layers * vocab_size / (n_engram_layers * len(tuple(orders)) * heads)))


def engram_placement(n_layers: int, vocab_size: int, orders, heads: int) -> tuple[tuple[int, ...], int]:
    """``(engram_layers, table_size)`` used by the MeKi comparisons: one early layer (a third of the
    depth) in small models, layers 1 and L/2 from 12 layers up, tables at MeKi's ROM."""
    layers = (n_layers // 3,) if n_layers < 12 else (1, n_layers // 2)
    return layers, matched_table_size(n_layers, vocab_size, len(layers), orders, heads)


def table_offsets(sizes) -> np.ndarray:
    """Row offset of each head in the concatenated table: ``[0, s0, s0 + s1, ...]`` (int64)."""
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))[:-1]]).astype(np.int64)


@functools.lru_cache(maxsize=None)
def _multipliers(orders, heads: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.integers(0, np.iinfo(np.uint64).max, size=(len(orders), heads, max(orders)),
                     dtype=np.uint64, endpoint=True)
    m |= np.uint64(1)  # odd: multiplication by m is a bijection modulo 2**64
    m.setflags(write=False)
    return m


def hash_multipliers(orders, heads: int, seed: int = 0) -> np.ndarray:
    """uint64 ``[len(orders), heads, max(orders)]``: ``m[i, j, k]`` multiplies the token ``k``
    positions back for order ``orders[i]``, head ``j``."""
    return _multipliers(tuple(int(n) for n in orders), int(heads), int(seed)).copy()


def ngram_hash_ids(tokens_BT: np.ndarray, orders, heads: int, table_size: int, seed: int = 0) -> np.ndarray:
    """int32 ``[B, T, len(orders) * heads]`` row ids into the concatenated Engram table."""
    tokens = np.asarray(tokens_BT)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, T]; got shape {tokens.shape}")
    if tokens.size and tokens.min() < 0:
        raise ValueError("token ids must be non-negative")
    orders = tuple(int(n) for n in orders)
    sizes = engram_table_sizes(orders, heads, table_size)
    if sum(sizes) > np.iinfo(np.int32).max:
        raise ValueError(f"Engram table of {sum(sizes)} rows does not fit int32 ids")
    offsets = table_offsets(sizes)
    mult = _multipliers(orders, int(heads), int(seed))
    B, T = tokens.shape
    values = tokens.astype(np.int64).astype(np.uint64)
    padded = np.concatenate([np.full((B, max(orders) - 1), PAD_VALUE, np.uint64), values], axis=1)
    # shifted[k][:, t] = v(x_{t-k}): the token k positions back, PAD_VALUE before the start.
    shifted = [padded[:, max(orders) - 1 - k: max(orders) - 1 - k + T] for k in range(max(orders))]
    out = np.empty((B, T, len(orders) * heads), np.int32)
    for i, n in enumerate(orders):
        for j in range(heads):
            mix = np.zeros((B, T), np.uint64)
            for k in range(n):
                mix ^= shifted[k] * mult[i, j, k]  # wraps modulo 2**64
            col = i * heads + j
            h = (mix & np.uint64(MASK63)).astype(np.int64) % np.int64(sizes[col])
            out[:, :, col] = (h + offsets[col]).astype(np.int32)
    return out
