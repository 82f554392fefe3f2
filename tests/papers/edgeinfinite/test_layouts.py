"""Which prompt tokens EdgeInfinite keeps where (papers/edgeinfinite/layouts.py), checked against what
Algorithm 1's prefill leaves in the KV cache and the memory, and the tiny preset's prompt lengths chosen
from it: every pair of Table 2's cells keeps different tokens in each band."""
import dataclasses
from itertools import combinations

import flax.linen as nn
import jax
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.config import load_config
from edge_jax.data.builders.longctx_tasks import TASKS, eval_prompts
from edge_jax.infer.kv_state import empty_caches, run_chunk
from edge_jax.layers.infini.compressive import empty_memory
from edge_jax.layers.rope import Rope
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.papers.edgeinfinite.inference import EdgeInfiniteSession
from edge_jax.papers.edgeinfinite.layouts import (
    PROMPT_SLACK,
    TABLE2_SWITCHES,
    alike_cells,
    kept_layout,
    prompt_lengths,
    table2_lengths,
    window_length,
    window_matters,
)

SWITCHES = list(TABLE2_SWITCHES.values())


def _model(vocab: int, sink: int, window: int, segment: int):
    cfg = ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=32,
                      rope_theta=10_000.0, infini_hidden=4, infini_sink=sink, infini_window=window,
                      infini_segment=segment)
    # jitted init (one compile; perturbed is one program itself)
    params = nn.unbox(jax.jit(DecoderLM(cfg).init)(jax.random.key(0), np.zeros((1, 8), np.int32))["params"])
    return cfg, perturbed(params, 1)


def _token_kv(cfg, params):
    """Layer 0's cached key (before RoPE) and value of every token id [V, G, K]: at layer 0 both depend
    on the token alone, so they name the token a cache slot or a compressed key came from."""
    ids = np.arange(cfg.vocab_size, dtype=np.int32)[None]
    memory = [dict(zip(("M", "z"), empty_memory(1, cfg.n_kv_heads, cfg.head_dim)))]
    _, extras = run_chunk(DecoderLM(cfg), params, ids, np.zeros_like(ids), empty_caches(cfg, 1, 1), memory)
    k, v = (np.asarray(extras[0][name][0], np.float64) for name in ("k", "v"))
    gaps = np.linalg.norm(k[:, None] - k[None], axis=(-2, -1)) + np.eye(len(k))
    assert gaps.min() > 1e-3  # every token has its own key
    return k, v


def _check_prefill(cfg, params, kv, length: int, keep_sink: bool, keep_window: bool):
    """Prefill tokens 0, 1, .. (token id = prompt position) and compare layer 0's cache and memory with
    kept_layout: the cached slots hold the sink then the local positions, at slots 0, 1, ..; the memory
    is what folding the compressed segments (each at positions sink .., after RoPE) gives."""
    k_of, v_of = kv
    cfg = dataclasses.replace(cfg, infini_keep_sink=keep_sink, infini_keep_window=keep_window)
    session = EdgeInfiniteSession(DecoderLM(cfg), params)
    session.prefill(np.arange(length, dtype=np.int32)[None])
    want = kept_layout(length, cfg.infini_sink, cfg.infini_window, cfg.infini_segment, keep_sink, keep_window)
    cache = session.caches[0]
    valid, pos = np.asarray(cache["valid"][0]), np.asarray(cache["pos"][0])
    slots = np.flatnonzero(valid[0])
    assert (valid == valid[0]).all() and (pos[:, slots] == pos[0, slots]).all()  # every KV group alike
    keys = np.asarray(cache["k"][0], np.float64)[slots]
    found = np.argmin(np.linalg.norm(keys[:, None] - k_of[None], axis=(-2, -1)), axis=1)
    np.testing.assert_allclose(keys, k_of[found], atol=1e-5)
    assert tuple(found) == want.cached and tuple(pos[0, slots]) == tuple(range(len(want.cached)))
    assert session.compressed_segments == len(want.compressed) and session.cache_tokens() == len(want.cached)
    M, z = np.zeros_like(np.asarray(session.memory[0]["M"][0], np.float64)), np.zeros(k_of.shape[1:])
    for seg in want.compressed:
        ids = np.asarray(seg)
        k = np.asarray(Rope.of(cfg).apply(k_of[ids][None].astype(np.float32),
                                          (len(want.sink) + np.arange(len(ids)))[None])[0], np.float64)
        sk = np.where(k > 0, k + 1.0, np.exp(np.minimum(k, 0.0)))  # σ = ELU + 1
        M, z = M + np.einsum("tgk,tgv->gkv", sk, v_of[ids]), z + sk.sum(axis=0)
    np.testing.assert_allclose(np.asarray(session.memory[0]["M"][0]), M, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(session.memory[0]["z"][0]), z, rtol=1e-4, atol=1e-4)
    assert session.has_memory == bool(want.compressed)


def test_kept_layout_is_what_prefill_keeps():
    """Small sizes (sink 4, window 6, segment 16), every switch, lengths around each boundary: short inputs
    kept whole, the first compression (sink + window + segment), one segment more, shorter than the sink."""
    cfg, params = _model(100, 4, 6, 16)
    kv = _token_kv(cfg, params)
    for keep_sink, keep_window in SWITCHES:
        for length in (3, 20, 25, 26, 27, 36, 37, 41, 42, 43, 52, 57, 58, 59, 90):
            _check_prefill(cfg, params, kv, length, keep_sink, keep_window)


def test_kept_layout_is_what_prefill_keeps_at_the_tiny_sizes():
    """Sink 32, window 32, segment 128 at the first near-band pair of lengths and their slack's bottom."""
    cfg, params = _model(600, 32, 32, 128)
    kv = _token_kv(cfg, params)
    for keep_sink, keep_window in SWITCHES:
        for length in (532, 543, 564, 575):
            _check_prefill(cfg, params, kv, length, keep_sink, keep_window)


def test_kept_layout_arithmetic():
    lay = kept_layout(2111, 32, 32, 128)
    assert (lay.sink, lay.local, len(lay.compressed)) == (range(32), range(1952, 2111), 15)
    assert lay.compressed[0] == range(32, 160) and lay.compressed[-1] == range(1824, 1952)
    assert lay.describe() == "32 + 15x128 + 159" and kept_layout(2111, 32, 32, 128, True, False).describe() == (
        "32 + 16x128 + 31")
    assert kept_layout(100, 32, 32, 128).cached == tuple(range(100))  # too short: all of it cached
    assert kept_layout(20, 32, 32, 128) == kept_layout(20, 32, 32, 128, True, False)
    with pytest.raises(ValueError, match="segment > 0"):
        kept_layout(100, 4, 4, 0)


def _cell_specs():
    """Each Table 2 cell's InfiniSpec (switches applied) and longctx keys, as the grid loads its config."""
    from edge_jax.grid.spec import load_grid
    grid = load_grid("ablations/edgeinfinite_tokens.py", "tiny")
    configs = {cell: load_config(grid.base, grid.overrides(cell, 0, {})) for cell in grid.cells}
    assert set(configs) == set(TABLE2_SWITCHES)
    for cell, config in configs.items():
        assert (config.model.infini_keep_sink, config.model.infini_keep_window) == TABLE2_SWITCHES[cell]
    lcs = {cell: config.longctx for cell, config in configs.items()}
    assert all(lc.to_dict() == lcs["full"].to_dict() for lc in lcs.values())
    return {cell: ModelConfig.from_config(c.model).infini_spec() for cell, c in configs.items()}, lcs["full"]


def _layouts(spec, n: int):
    return kept_layout(n, spec.sink, spec.window, spec.segment)  # the spec has the switches applied


def test_every_pair_of_table2_cells_keeps_different_tokens_in_each_band():
    """The tiny lengths as the grid loads them (each cell's config). Pairs that differ in the sink keep
    different tokens at every length; the two pairs that differ only in the window (full / no_window,
    no_sink / no_both) at one length of each multiple of the base's window (4, 8, 16 x; near: 1, 2 x),
    for every prompt length of its slack, and never both at one length (see the test below). The paper's
    band keeps 30 prompts per seed (5 tasks x 6 lengths x 1), as its 5 x 3 x 2 before."""
    specs, lc = _cell_specs()
    base_window = load_config("configs/edgeinfinite.py:stage=base").data.seq_len
    bands = {"far": tuple(lc.lengths), "near": tuple(lc.near_lengths)}
    assert bands == {"far": (2079, 2111, 4127, 4159, 8223, 8255), "near": (543, 575, 1055, 1087)}
    assert len(TASKS) * len(bands["far"]) * lc.examples == 30 and lc.examples == 1
    for band, multiples in (("far", {4, 8, 16}), ("near", {1, 2})):
        groups: dict[int, list[int]] = {}
        for length in bands[band]:
            groups.setdefault(length // base_window, []).append(length)
        assert set(groups) == multiples
        for multiple, lengths in groups.items():
            assert len({n % specs["full"].segment for n in lengths}) == len(lengths) == 2
            for a, b in combinations(specs, 2):
                apart = [all(_layouts(specs[a], n) != _layouts(specs[b], n) for n in prompt_lengths(length))
                         for length in lengths]
                sink_pair = specs[a].sink != specs[b].sink
                assert all(apart) if sink_pair else any(apart), (band, multiple, a, b)
        full = specs["full"]
        for length in bands[band]:  # what the docs' table states: one window pair alike per length
            assert alike_cells(length, full.sink, full.window, full.segment) in (
                [("full", "no_window")], [("no_sink", "no_both")])


def test_no_single_length_separates_both_window_pairs():
    """At the tiny sizes the window matters with the sink at lengths 33 .. 63 (mod 128), without it at
    1 .. 31: disjoint, so each length leaves one window pair alike."""
    full = _cell_specs()[0]["full"]
    sizes = (full.sink, full.window, full.segment)
    assert sizes == (32, 32, 128)
    changes = {keep: {n % 128 for n in range(1000, 1128)
                      if kept_layout(n, *sizes, keep, True) != kept_layout(n, *sizes, keep, False)}
               for keep in (True, False)}
    assert changes == {True: set(range(33, 64)), False: set(range(1, 32))}


def test_the_prompts_of_the_tiny_lengths_lie_in_the_slack_and_keep_the_question():
    """Every prompt (each task, several seeds) is 0 .. PROMPT_SLACK tokens shorter than asked, and with
    the sink and window (full) the question stays in the KV cache."""
    specs, lc = _cell_specs()
    for length in tuple(lc.near_lengths) + tuple(lc.lengths):
        for task in TASKS:
            for seed in range(3):
                for r in eval_prompts(task, length, 2, seed):
                    n = len(r["prompt"])  # byte tokens
                    assert n in prompt_lengths(length)
                    tail = n - r["prompt"].rindex("\n\nQuestion:")
                    assert len(_layouts(specs["full"], n).local) > tail


@pytest.mark.parametrize("sink,window,segment", [(32, 32, 128), (300, 200, 2048), (16, 16, 32)])
def test_window_length_is_the_top_of_a_run_where_the_window_matters(sink, window, segment):
    for target in (700, 2048, 5000):
        for keep_sink in (True, False):
            length = window_length(target, sink, window, segment, keep_sink)
            assert target <= length < target + segment + PROMPT_SLACK
            assert window_matters(length, sink, window, segment, keep_sink)
            assert not window_matters(length + 1, sink, window, segment, keep_sink)
            for n in prompt_lengths(length):  # one more segment compressed without the window, fewer tokens kept
                full, less = (kept_layout(n, sink, window, segment, keep_sink, w) for w in (True, False))
                assert len(less.compressed) == len(full.compressed) + 1 and len(less.local) < len(full.local)
        assert table2_lengths((target,), sink, window, segment) == tuple(sorted(
            {window_length(target, sink, window, segment, k) for k in (True, False)}))
    assert window_length(2048, 4, 8, 16) is None and table2_lengths((2048,), 4, 8, 16) == (2048,)  # window < slack
