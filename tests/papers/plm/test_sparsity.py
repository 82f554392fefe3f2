"""PLM Algorithm 1: sweep, rate, Table 14 counts, and `edge-jax analyze sparsity`."""
import dataclasses
import os

import jax
import numpy as np
import pytest

from edge_jax.cli import main
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.papers.plm.sparsity import check_ratios, parameter_usage, sparsity_sweep

CFG = ModelConfig(vocab_size=61, d_model=32, n_layers=2, n_heads=2, n_kv_heads=2, head_dim=16, d_ff=64,
                  qk_norm=False, ffn="relu2", attention="mla", kv_lora_rank=16, d_rope=8)


def _batches(cfg, n=2, B=2, T=16):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        toks = rng.integers(0, cfg.vocab_size, (B, T + 1)).astype(np.int32)
        out.append({"inputs": toks[:, :-1], "targets": toks[:, 1:], "mask": np.ones((B, T), np.float32)})
    return out


@pytest.mark.parametrize("ffn", ["relu2", "swiglu"])
def test_sweep_curve_and_rate(ffn):
    cfg = dataclasses.replace(CFG, ffn=ffn)
    model = DecoderLM(cfg)
    params = jax.jit(model.init)(jax.random.key(0), np.zeros((1, 4), np.int32))["params"]  # one compile
    sweep = sparsity_sweep(model, params, _batches(cfg), ratios=[0, 0.25, 0.5, 0.75, 1.0], max_ppl_increase=0.0,
                           max_rel_increase=0.0)
    # r = 0 masks nothing; r = 1 zeroes every FFN (at random init that may lower perplexity, so only "changed").
    assert sweep["ppl_increase"][0] == 0.0 and abs(sweep["ppl"][-1] - sweep["base_ppl"]) > 1e-3
    if ffn == "relu2":
        # Random init: about half of relu2's activations are exactly 0, so masking up to them is free.
        assert 0.4 < sweep["zero_fraction"] < 0.6
        assert sweep["sparsity_rate"] >= 0.4 and sweep["sparsity_rate_abs"] == sweep["sparsity_rate"]
    else:
        assert sweep["zero_fraction"] == 0.0  # a gated product is almost never exactly 0
    loose = sparsity_sweep(model, params, _batches(cfg), ratios=[0, 0.5, 1.0], max_ppl_increase=1e9,
                           max_rel_increase=0.0)
    assert loose["sparsity_rate_abs"] == 1.0


def test_relative_limit_is_the_absolute_limit_scaled_by_the_base_perplexity():
    model = DecoderLM(CFG)
    params = jax.jit(model.init)(jax.random.key(1), np.zeros((1, 4), np.int32))["params"]  # one compile
    ratios = [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    probe = sparsity_sweep(model, params, _batches(CFG), ratios=ratios)
    # a limit between two grid points' increases, so both rates are bisection-refined inside one interval
    incs = sorted(i for i in probe["ppl_increase"] if i > 0)
    assert incs, "masking must raise the perplexity somewhere for this test"
    limit = 0.5 * incs[0]
    rel = sparsity_sweep(model, params, _batches(CFG), ratios=ratios, max_rel_increase=limit / probe["base_ppl"],
                         max_ppl_increase=1e9)
    absolute = sparsity_sweep(model, params, _batches(CFG), ratios=ratios, max_ppl_increase=limit)
    assert rel["sparsity_rate"] == pytest.approx(absolute["sparsity_rate_abs"], abs=2e-3)
    assert rel["sparsity_rate_abs"] == 1.0


def test_parameter_usage_counts_the_consumers_of_masked_activations():
    plain = parameter_usage(CFG, 0.5)
    gated = parameter_usage(dataclasses.replace(CFG, ffn="swiglu"), 0.5)
    per_matrix = CFG.n_layers * CFG.d_model * CFG.d_ff
    assert plain["masked_params"] == 0.5 * per_matrix and gated["masked_params"] == 2 * 0.5 * per_matrix
    assert plain["executed_params"] == plain["total_params"] - plain["masked_params"]


def test_ratios_outside_unit_interval_are_rejected():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        check_ratios([0.2, 1.5])


def test_cli_sparsity_end_to_end(tiny_config, tmp_path, capsys):
    from edge_jax.train.loop import train_and_evaluate
    wd = str(tmp_path / "plm")
    cfg = tiny_config(**{"model.attention": "mla", "model.kv_lora_rank": 16, "model.d_rope": 8,
                         "model.qk_norm": False, "model.ffn": "relu2", "train.steps": 2, "train.warmup_steps": 1,
                         "train.ckpt_every": 2, "train.eval_every": 2, "train.eval_batches": 1,
                         "train.sparsity_batches": 1})
    result = train_and_evaluate(cfg, wd)
    assert 0 <= result["sparsity_rate"] <= 1 and os.path.exists(os.path.join(wd, "sparsity.json"))
    out = tmp_path / "sp"
    assert main(["analyze", "sparsity", "--workdir", wd, "--batches", "1", "--ratios", "0,0.5,0.9,1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sparsity_rate=" in printed and "sparsity_rate_abs=" in printed
    for name in ("sparsity.md", "sparsity.csv", "sparsity.png"):
        assert (out / name).stat().st_size > 0
    assert main(["analyze", "sparsity", "--workdir", wd, "--ratios", "0,1.2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "[0, 1]" in err and err.count("\n") == 1
