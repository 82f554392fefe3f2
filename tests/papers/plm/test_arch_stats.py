"""PLM's hardware columns (edge_jax.papers.plm.arch_stats): the forward's parameters against the initialised tree,
its FLOPs against a count of the matmuls by hand, its peak memory against the float32 parameters and logits; the
grid post hook's table from given stats (loss averaged over seeds, the derived columns), and Table 5 as the paper
prints it."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.config import load_config
from edge_jax.grid.post import PostCannotRun
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.papers.plm import arch_stats

V, T = 320, 16


def _model(**changes) -> dict:
    return {**load_config("configs/lm.py:size=tiny").model.to_dict(), "vocab_size": V, **changes}


def test_table5_is_the_papers():
    """PLM Table 5, copied from the paper by hand (layers, d_model, d_ffn, kv rank, params, MACs/param, FLOPs/param,
    time/layer, peak memory, loss)."""
    paper = """28 2816 7040 256 1.54B 0.5243 1.261e-4 7.3188 7.031e-5 2.639
               32 2304 5760 256 1.21B 0.2023 5.209e-4 3.2364 7.578e-5 2.653
               32 2560 6400 256 1.47B 0.1986 3.660e-4 3.1728 6.595e-5 2.659
               36 2304 5760 256 1.36B 0.1806 4.142e-4 3.2660 6.802e-5 2.653
               40 2304 5760 256 1.51B 0.1645 3.365e-4 3.2853 7.121e-5 2.665
               36 2048 8192 256 1.55B 0.1785 3.512e-4 3.2225 7.184e-5 2.632
               32 2048 8192 512 1.54B 0.1722 4.214e-4 2.7499 6.687e-5 2.634"""
    rows = [[int(v) for v in line.split()[:4]] + [line.split()[4]] + [float(v) for v in line.split()[5:]]
            for line in paper.splitlines()]
    assert [list(r) for r in arch_stats.PAPER_TABLE5] == rows


class JitInit(DecoderLM):
    """DecoderLM whose init is one compiled call: drawn op by op, the weights cost ~5 s of compiles on a cold cache,
    and no statistic depends on how they were drawn."""

    def init(self, *args, **kwargs):
        return jax.jit(super().init)(*args, **kwargs)


def test_forward_stats_against_counts_by_hand(monkeypatch):
    """One GQA + SwiGLU layer (tied embeddings): FLOPs per token at least 2 x (the layer's matrices + the V x d
    head) + the attention's 2 x 2 x T x heads x head_dim (XLA counts every key, masked or not), and at most 5%
    more (norms, softmax, SiLU); peak memory at least the float32 parameters and logits."""
    monkeypatch.setattr(arch_stats, "DecoderLM", JitInit)
    cfg = ModelConfig.from_config(_model(n_layers=1, d_ff=96))
    assert cfg.attention == "gqa" and cfg.ffn == "swiglu" and cfg.tie_embeddings
    stats = arch_stats.forward_stats({"one": cfg}, seq_len=T, repeats=1)["one"]
    shapes = jax.eval_shape(DecoderLM(cfg).init, jax.random.key(0), jnp.zeros((1, T), jnp.int32))["params"]
    leaves = [(jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)]
    total = sum(np.prod(leaf.shape) for _, leaf in leaves)
    embedding = sum(np.prod(leaf.shape) for path, leaf in leaves if path.startswith("['embed']"))
    assert (stats["params"], stats["non_embedding"]) == (total, total - embedding)
    matrices = sum(np.prod(leaf.shape) for path, leaf in leaves if len(leaf.shape) >= 2 and "embed" not in path)
    by_hand = 2 * (matrices + V * cfg.d_model) + 2 * 2 * T * cfg.n_heads * cfg.head_dim
    assert by_hand <= stats["flops_per_token"] <= 1.05 * by_hand, (stats["flops_per_token"], by_hand)
    assert stats["macs_per_token"] == stats["flops_per_token"] / 2
    assert stats["peak_bytes"] >= 4 * (total + T * V)
    assert 0 < stats["time_per_layer_s"] < 1


class Grid:
    name, title, metric, cells = "arch", "Arch search", "val_loss", ("wide", "deep", "never_ran")


def _records(rng):
    models = {"wide": _model(n_layers=2, d_model=96), "deep": _model(n_layers=3, vocab_size=0)}
    return [{"cell": cell, "seed": seed, "config": {"model": models[cell], "data": {"seq_len": 24}},
             "vocab_size": V, "metrics": {"val_loss": float(rng.uniform(2, 4))}}
            for cell in ("deep", "wide") for seed in range(2 if cell == "wide" else 3)]


def test_the_post_hook_writes_a_row_per_cell_from_the_stats(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    records = _records(rng)
    stats = {c: {"params": int(rng.integers(10**5, 10**6)), "non_embedding": int(rng.integers(10**4, 10**5)),
                 "flops_per_token": float(rng.uniform(1e5, 1e6)), "peak_bytes": int(rng.integers(10**6, 10**7)),
                 "time_per_layer_s": float(rng.uniform(1e-4, 1e-3))} for c in ("wide", "deep")}
    for s in stats.values():
        s["macs_per_token"] = s["flops_per_token"] / 2
    asked = []
    monkeypatch.setattr(arch_stats, "forward_stats", lambda cfgs, seq_len: asked.append((cfgs, seq_len)) or stats)
    path, = arch_stats.write_arch_stats(Grid(), records, tmp_path)
    cfgs, seq_len = asked[0]
    assert seq_len == 24 and list(cfgs) == ["wide", "deep"]  # grid order; a cell without records is left out
    assert (cfgs["wide"].n_layers, cfgs["wide"].d_model, cfgs["deep"].n_layers) == (2, 96, 3)
    assert cfgs["deep"].vocab_size == V  # vocab 0 in the config: the size the runner stored beside it
    text = path.read_text()
    assert path == tmp_path / "arch_stats.md" and text.startswith("# Arch search: hardware columns")
    rows = {line.split("|")[1].strip(): [v.strip() for v in line.split("|")[2:-1]]
            for line in text.splitlines() if re.match(r"\| (wide|deep) \|", line)}
    for cell, s in stats.items():
        loss = np.mean([r["metrics"]["val_loss"] for r in records if r["cell"] == cell])
        m = cfgs[cell]
        assert rows[cell] == [str(m.n_layers), str(m.d_model), str(m.kv_lora_rank), f"{s['params']:,}",
                              f"{s['non_embedding']:,}", f"{round(s['macs_per_token']):,}",
                              f"{round(s['flops_per_token']):,}", f"{s['macs_per_token'] / s['params']:.3f}",
                              f"{s['time_per_layer_s'] * 1000:.3f}", f"{s['peak_bytes'] / 1048576:.2f}",
                              f"{loss:.4f}"]
    assert "| 32 | 2048 | 8192 | 512 | 1.54B | 0.1722 | 0.0004214 | 2.7499 | 6.687e-05 | 2.634 |" in text


def test_the_post_hook_without_a_vocabulary_size_keeps_its_output(tmp_path):
    records = _records(np.random.default_rng(1))
    for r in records:
        r.pop("vocab_size")
    with pytest.raises(PostCannotRun, match="vocabulary size unknown for the deep seed 0 record"):
        arch_stats.write_arch_stats(Grid(), records, tmp_path)
    assert not (tmp_path / "arch_stats.md").exists()
