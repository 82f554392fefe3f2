"""Every fast path against the ``*_reference`` beside it in the source, in one table.

A row is ``Case(name, fast, reference, inputs, dtypes)``: ``inputs(key, dtype)`` builds random
non-zero arguments (``jax.random``) with the floating ones in ``dtype``; the fast function gets them
as they are, the reference gets the floating arrays upcast to float32 (it is the plain way: loops,
plain softmax, float64 inside). Outputs (any pytree) are compared in float32 by relative norm with a
tolerance chosen by dtype; integer and boolean outputs (indices, masks) must be equal. Rows cover the
ragged cases where they apply: partially valid cache slots, padded tokens, a segment boundary, rows
shorter than a budget, an empty expert. A new fast path (a Pallas kernel) is one more row.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.infer import kv_select as sel
from edge_jax.layers.attention import cached as ca
from edge_jax.layers.attention import dot as da
from edge_jax.layers.attention import mla
from edge_jax.layers.infini import compressive as infini
from edge_jax.layers.infini import segmented
from edge_jax.layers.infini.spec import InfiniSpec
from edge_jax.layers.kernels import expert_ffn as kffn
from edge_jax.layers.kernels import expert_ffn_gpu as kffn_gpu
from edge_jax.layers.kernels import flash
from edge_jax.layers.kernels import mla_decode as kmla
from edge_jax.layers.kernels import mla_decode_gpu as kmla_gpu
from edge_jax.layers.kernels import segment_attention as kseg
from edge_jax.layers.kernels import segment_attention_gpu as kseg_gpu
from edge_jax.layers.moe import execute as moe
from edge_jax.layers.moe.plan import LayerPlan
from edge_jax.layers.rope import Rope

TOL = {"float32": 1e-5, "bfloat16": 2e-2}
BOTH = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fast: Callable
    reference: Callable
    inputs: Callable  # (key, dtype) -> tuple of arguments
    dtypes: tuple = BOTH


@functools.partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape, dtype, scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def _upcast(args):
    return jax.tree_util.tree_map(
        lambda a: a.astype(jnp.float32) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating) else a,
        args)


# ---------------------------------------------------------------- input builders


def attention_inputs(key, dtype, per_group=False):
    """GQA (4 query heads on 2 KV groups), 5 queries after 4 earlier slots; row 1 has only 6 valid
    slots; ``per_group``: group 1 also misses two slots (a [B, G, T, S] mask)."""
    B, T, S, H, G, K = 2, 5, 9, 4, 2, 8
    kq, kk, kv = jax.random.split(key, 3)
    slot, qpos = jnp.arange(S), S - T + jnp.arange(T)
    mask = (slot[None, None] <= qpos[None, :, None]) & (slot[None, None] < jnp.array([S, 6])[:, None, None])
    if per_group:
        mask = jnp.stack([mask, mask & ~jnp.isin(slot, jnp.array([1, 2]))], axis=1)
    return (_normal(kq, (B, T, H, K), dtype), _normal(kk, (B, S, G, K), dtype), _normal(kv, (B, S, G, K), dtype),
            mask)


def memory_inputs(key, dtype, rule):
    """A memory (float32) and 6 keys/values of 2 groups; row 1's last 2 tokens are padding."""
    B, T, G, K = 2, 6, 2, 8
    km, kz, kk, kv = jax.random.split(key, 4)
    valid = jnp.arange(T)[None] < jnp.array([T, 4])[:, None]
    return (_normal(km, (B, G, K, K), jnp.float32, 0.1), jnp.abs(_normal(kz, (B, G, K), jnp.float32)) + 1.0,
            _normal(kk, (B, T, G, K), dtype), _normal(kv, (B, T, G, K), dtype), valid, rule)


def readout_inputs(key, dtype):
    M, z, *_ = memory_inputs(key, jnp.float32, "linear")
    return _normal(jax.random.fold_in(key, 1), (2, 6, 4, 8), dtype), M, z


def memory_gate(key, H, K, hidden=8):
    """A bound EdgeInfinite memory gate with random non-zero parameters."""
    gate = infini.MemoryGate(H, K, hidden, gate_init=0.5)
    a = jnp.zeros((1, 1, H, K))
    params = nn.unbox(gate.init(key, a, a, False))["params"]
    keys = jax.random.split(key, len(jax.tree_util.tree_leaves(params)))
    leaves, tree = jax.tree_util.tree_flatten(params)
    params = jax.tree_util.tree_unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])
    return gate.bind({"params": params})


def segmented_inputs(key, dtype):
    """13 tokens: 2 sink, 2 segments of 4 (a segment boundary), 3 remaining; delta memory."""
    B, T, H, G, K = 2, 13, 4, 2, 8
    spec = InfiniSpec(infini_hidden=8, infini_sink=2, infini_window=2, infini_segment=4, infini_update="delta")
    layout = infini.segment_layout(T, spec.sink, spec.window, spec.segment)
    kq, kk, kv, kg = jax.random.split(key, 4)
    return (_normal(kq, (B, T, H, K), dtype), _normal(kk, (B, T, G, K), dtype), _normal(kv, (B, T, G, K), dtype),
            layout, Rope(1e4), spec, memory_gate(kg, H, K))


def policy_cache(key, dtype, B=2, P=6, G=2, K=8, latent=False):
    """A cache with ``pos``: random positions per group, some slots empty."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    if latent:
        arrays = {"c_kv": _normal(k1, (B, P, 12), dtype), "k_rope": _normal(k2, (B, P, K), dtype)}
    else:
        arrays = {"k": _normal(k1, (B, P, G, K), dtype), "v": _normal(k2, (B, P, G, K), dtype)}
    valid = jax.random.bernoulli(k4, 0.7, (B, G, P)).at[:, :, 0].set(True)
    return dict(arrays, pos=jax.random.randint(k3, (B, G, P), 0, 20), valid=valid)


def join_inputs(key, dtype, plain=False, latent=False):
    """A chunk of 3 tokens beside a policy cache (appended at positions 20 ..) or, ``plain``, a plain
    cache of 9 slots with 4 filled (written in place at slots 4 .. 6)."""
    B, T, G, K = 2, 3, 2, 8
    kc, kn1, kn2 = jax.random.split(key, 3)
    groups = 1 if latent else G
    if plain:
        ctx = {name: a for name, a in policy_cache(kc, dtype, P=9, G=groups, latent=latent).items() if name != "pos"}
        ctx["valid"] = jnp.broadcast_to(jnp.arange(9) < 4, (B, 1, 9))
        start = 4
    else:
        ctx, start = policy_cache(kc, dtype, G=groups, latent=latent), 20
    if latent:
        new, rotate = {"c_kv": _normal(kn1, (B, T, 12), dtype), "k_rope": _normal(kn2, (B, T, K), dtype)}, "k_rope"
    else:
        new, rotate = {"k": _normal(kn1, (B, T, G, K), dtype), "v": _normal(kn2, (B, T, G, K), dtype)}, "k"
    return ctx, new, jnp.broadcast_to(start + jnp.arange(T), (B, T)), Rope(1e4), rotate


def context_inputs(key, dtype, plain=False):
    """GQA over a cache; for a policy cache also EdgeInfinite's memory (read, and this chunk
    compressed with its last token padding) and SnapKV votes of the last 2 queries."""
    ctx, new, positions, rope, _ = join_inputs(key, dtype, plain=plain)
    B, T, _, K = new["k"].shape
    spec = InfiniSpec(infini_hidden=8, infini_update="delta")
    if not plain:
        M, z, *_ = memory_inputs(jax.random.fold_in(key, 2), jnp.float32, "linear")
        ctx = dict(ctx, M=M, z=z, has_memory=True, compress=True, votes=2, votes_end=T,
                   compress_valid=jnp.arange(T)[None].repeat(B, 0) < T - 1)
    q = _normal(jax.random.fold_in(key, 3), (B, T, 4, K), dtype)
    return q, new["k"], new["v"], positions, ctx, rope, spec, memory_gate(jax.random.fold_in(key, 4), 4, K)


def mla_inputs(key, dtype):
    """Latent attention, 3 queries after 6 slots; row 1 has 4 valid slots before its queries."""
    B, T, S, H, K, R, C = 2, 3, 9, 4, 8, 4, 12
    ks = jax.random.split(key, 6)
    args = [_normal(k, s, dtype, sc) for k, s, sc in zip(ks, [(B, T, H, K), (B, T, H, R), (B, S, C), (B, S, R),
                                                               (C, H, K), (C, H, K)], [1, 1, 1, 1, 0.3, 0.3])]
    slot, qpos = jnp.arange(S), S - T + jnp.arange(T)
    mask = (slot[None, None] <= qpos[None, :, None]) & ((slot >= S - T) | (slot < jnp.array([6, 4])[:, None]))[:, None]
    return (*args, mask)


def votes_inputs(key, dtype):
    """Positive votes [B, G, S] like summed attention rows, and per-row valid prefixes: full, shorter
    than the budget below, and empty."""
    B, G, S = 3, 2, 20
    votes = jax.nn.softmax(_normal(key, (B, G, 4, S), jnp.float32, 2.0), axis=-1).sum(axis=2).astype(dtype)
    return votes, jnp.arange(S)[None] < jnp.array([S, 6, 0])[:, None]


def pool_inputs(key, dtype, kernel, kind):
    """The votes pooled over each row's valid slots only."""
    votes, valid = votes_inputs(key, dtype)
    return votes, kernel, kind, valid[:, None]


def moe_inputs(key, dtype, with_plan=False):
    """12 tokens routed top-2 among experts 0-2 (expert 3 gets none: an empty expert); with a plan
    also a score and two padding tokens."""
    N, D, F, E = 12, 8, 16, 4
    kx, kg, ku, kd, ki, kw, ks = jax.random.split(key, 7)
    experts = tuple(_normal(k, s, dtype, 0.3) for k, s in zip((kg, ku, kd), [(E, D, F), (E, D, F), (E, F, D)]))
    ids = jax.vmap(lambda k: jax.random.permutation(k, 3)[:2])(jax.random.split(ki, N)).astype(jnp.int32)
    w = jax.nn.softmax(_normal(kw, (N, 2), jnp.float32), axis=-1).astype(dtype)
    x = _normal(kx, (N, D), dtype)
    if not with_plan:
        return x, ids, w, experts
    plan = LayerPlan(capacity=(3, 3, 2, 0), groups=((0, 1), (2,)), fallback=(3,))
    return x, ids, w, _normal(ks, (N,), jnp.float32), jnp.arange(N) < N - 2, experts, plan


def expert_group_inputs(key, dtype):
    """A static group of 3 experts with 16 slots each, filled 16, 5 and 0 (an empty expert); the
    padding rows are non-zero too (the kernel and the reference must both ignore them)."""
    G, C, D, F = 3, 16, 128, 256
    kx, kg, ku, kd = jax.random.split(key, 4)
    weights = (_normal(k, s, dtype, 0.1) for k, s in zip((kg, ku, kd), [(G, D, F), (G, D, F), (G, F, D)]))
    return (_normal(kx, (G, C, D), dtype), *weights, jnp.array([16, 5, 0], jnp.int32))


def latent_decode_inputs(key, dtype):
    """One query per row over a 40-slot latent cache filled 40 and 13 slots (mid-block)."""
    B, H, C, R, S = 2, 4, 32, 8, 40
    kq, kr, kl, kk = jax.random.split(key, 4)
    return (_normal(kq, (B, H, C), dtype), _normal(kr, (B, H, R), dtype), _normal(kl, (B, S, C), dtype),
            _normal(kk, (B, S, R), dtype), jnp.array([40, 13], jnp.int32))


def segment_kernel_inputs(key, dtype):
    """2 rows x 2 segments of 16 tokens, 4 query heads on 2 KV heads, a 5-token sink, and a memory."""
    B, N, L, H, G, K, S = 2, 2, 16, 4, 2, 8, 5
    kq, kk, kv, ks, kt, km, kz = jax.random.split(key, 7)
    return (_normal(kq, (B * N, L, H, K), dtype), _normal(kk, (B * N, L, G, K), dtype),
            _normal(kv, (B * N, L, G, K), dtype), _normal(ks, (B, S, G, K), dtype), _normal(kt, (B, S, G, K), dtype),
            _normal(km, (B * N, G, K, K), jnp.float32), jnp.abs(_normal(kz, (B * N, G, K), jnp.float32)) + 1.0)


def causal_inputs(key, dtype):
    kq, kk, kv = jax.random.split(key, 3)
    return _normal(kq, (1, 128, 4, 16), dtype), _normal(kk, (1, 128, 2, 16), dtype), _normal(kv, (1, 128, 2, 16), dtype)


# ---------------------------------------------------------------- the table


def _capacity_fast(x, ids, w, score, valid, experts, plan, overflow="drop"):
    return moe.capacity_moe(x, ids, w, score, valid, experts, plan, overflow=overflow)[0]


def _capacity_reference(x, ids, w, score, valid, experts, plan):
    return moe.moe_reference(x, ids, w, experts, score, valid, plan.capacity)


def _overflow_fallback_reference(x, ids, w, score, valid, experts, plan):
    """The overflow runs exactly on the fallback path: nothing is dropped, the output is dropless."""
    return moe.moe_reference(x, ids, w, experts, valid_N=valid)


def _moe_reference(x, ids, w, experts):
    return moe.moe_reference(x, ids, w, experts)


P = functools.partial
CASES = [
    Case("dot_attention", da.dot_product_attention, da.dot_product_attention_reference, attention_inputs),
    Case("dot_attention/per_group_probs", P(da.dot_product_attention, return_probs=True),
         P(da.dot_product_attention_reference, return_probs=True), P(attention_inputs, per_group=True)),
    Case("memory_update/linear", infini.memory_update, infini.memory_update_reference, P(memory_inputs, rule="linear")),
    Case("memory_update/delta", infini.memory_update, infini.memory_update_reference, P(memory_inputs, rule="delta")),
    Case("memory_readout", infini.memory_readout, infini.memory_readout_reference, readout_inputs),
    Case("segmented_attention", segmented.segmented_attention, segmented.segmented_attention_reference,
         segmented_inputs),
    Case("join_cache/policy", ca.join_cache, ca.join_cache_reference, join_inputs),
    Case("join_cache/plain", ca.join_cache, ca.join_cache_reference, P(join_inputs, plain=True)),
    Case("join_cache/latent", ca.join_cache, ca.join_cache_reference, P(join_inputs, latent=True)),
    Case("join_cache/latent_plain", ca.join_cache, ca.join_cache_reference, P(join_inputs, plain=True, latent=True)),
    Case("context_attention/memory_votes", ca.context_attention, ca.context_attention_reference, context_inputs),
    Case("context_attention/plain", ca.context_attention, ca.context_attention_reference,
         P(context_inputs, plain=True)),
    Case("mla/absorbed", mla.latent_attention, mla.mla_attention_reference, mla_inputs),
    Case("mla/expanded", mla.expanded_attention, mla.mla_attention_reference, mla_inputs),
    Case("pool_votes/max", sel.pool_votes, sel.pool_votes_reference, P(pool_inputs, kernel=5, kind="max")),
    Case("pool_votes/avg", sel.pool_votes, sel.pool_votes_reference, P(pool_inputs, kernel=3, kind="avg")),
    Case("snapkv_indices", P(sel.snapkv_indices, budget=8, window=3, kernel=3, kind="avg"),
         P(sel.snapkv_indices_reference, budget=8, window=3, kernel=3, kind="avg"), votes_inputs),
    Case("streaming_indices", sel.streaming_indices, sel.streaming_indices_reference,
         lambda key, dt: (jnp.array([30, 12, 5, 0]), 3, 6, 24), ("float32",)),
    Case("moe/dropless", moe.dropless, _moe_reference, moe_inputs),
    Case("moe/ragged", moe.ragged, _moe_reference, moe_inputs),
    Case("moe/capacity_fallback", _capacity_fast, _capacity_reference, P(moe_inputs, with_plan=True)),
    Case("moe/capacity_overflow_fallback", P(_capacity_fast, overflow="fallback"), _overflow_fallback_reference,
         P(moe_inputs, with_plan=True)),
    # the Pallas kernels (interpreted here; tests/layers/kernels/ has their ragged cases and TPU compiles)
    Case("kernel/expert_ffn", P(kffn.expert_ffn, block_c=8, block_f=128), kffn.expert_ffn_reference,
         expert_group_inputs),
    Case("kernel/mla_decode", P(kmla.mla_decode, scale=0.25, block_s=8, splits=2),
         P(kmla.mla_decode_reference, scale=0.25), latent_decode_inputs),
    Case("kernel/mla_decode_xla", P(kmla.mla_decode_xla, scale=0.25, split_s=16),
         P(kmla.mla_decode_reference, scale=0.25), latent_decode_inputs),
    Case("kernel/segment_attention", P(kseg.segment_attention, block_q=8, block_k=8), kseg.segment_attention_reference,
         segment_kernel_inputs),
    Case("kernel/flash", flash.causal_attention, flash.causal_attention_reference, causal_inputs),
    # their GPU (Triton) variants, interpreted here; tests/layers/kernels/test_*_gpu.py lower them for CUDA
    Case("kernel/expert_ffn_gpu", P(kffn_gpu.expert_ffn_gpu, block_c=16, block_f=128), kffn.expert_ffn_reference,
         expert_group_inputs),
    Case("kernel/mla_decode_gpu", P(kmla_gpu.mla_decode_gpu, scale=0.25, block_s=16, splits=3),
         P(kmla.mla_decode_reference, scale=0.25), latent_decode_inputs),
    Case("kernel/segment_attention_gpu", P(kseg_gpu.segment_attention_gpu, block_q=16, block_k=16),
         kseg.segment_attention_reference, segment_kernel_inputs),
]


def assert_matches(got, want, tol: float, name: str):
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, f"{name}: outputs differ in structure: {got_tree} vs {want_tree}"
    floats = 0
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{name} output {i}: shape {g.shape} vs {w.shape}"
        if not (np.issubdtype(w.dtype, np.floating) or w.dtype == jnp.bfloat16):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {i}")
            continue
        g, w = g.astype(np.float32), w.astype(np.float32)
        floats += bool(np.abs(w).max() > 0)
        err = np.linalg.norm(g - w) / np.linalg.norm(w) if np.abs(w).max() > 0 else np.abs(g).max()
        assert err <= tol, f"{name} output {i}: relative error {err:.3g} > {tol}"
    assert floats or not any(np.issubdtype(np.asarray(w).dtype, np.floating) for w in want_leaves), \
        f"{name}: every floating output is zero; the inputs test nothing"


@pytest.mark.parametrize("case,dtype", [(c, d) for c in CASES for d in c.dtypes],
                         ids=[f"{c.name}-{d}" for c in CASES for d in c.dtypes])
def test_fast_path_matches_reference(case, dtype):
    args = case.inputs(jax.random.key(0), jnp.dtype(dtype))
    assert_matches(_run_jitted(case.fast, args), case.reference(*_upcast(args)), TOL[dtype], case.name)


def _run_jitted(fast, args):
    """``fast(*args)`` compiled as the model's steps compile it (one program, not one per op); the arguments
    that hold no array (sizes, plans, specs, modules) are closed over, as constants of the program."""
    arrays = [i for i, a in enumerate(args) if jax.tree_util.tree_leaves(a) and all(
        isinstance(x, (jax.Array, np.ndarray)) for x in jax.tree_util.tree_leaves(a))]

    def run(*traced):
        full = list(args)
        for i, a in zip(arrays, traced):
            full[i] = a
        return fast(*full)
    return jax.jit(run)(*[args[i] for i in arrays])
