import csv
import json
import os
import shutil

import flax.linen as nn
import jax
import numpy as np
import pytest

from edge_jax.cli import main
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.inputs import apply_kwargs, example_inputs, host_inputs
from edge_jax.papers.meki.logit_lens import layer_kl

TINY = dict(vocab_size=64, d_model=32, n_layers=3, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64)
VARIANTS = {"tied": {}, "untied": {"tie_embeddings": False}, "meki": {"memory": "meki", "d_mem": 8}}


def init(**extra):
    """A tiny model with random parameters drawn with numpy (no init compile): matrices ~ N(0, 0.3)
    so the layers' predictions differ visibly, vectors and scalars ~ 1 + N(0, 0.1)."""
    cfg = ModelConfig(**TINY, **extra)
    model = DecoderLM(cfg)
    shapes = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), **example_inputs(cfg))["params"])
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(
        lambda s: (rng.normal(0, 0.3, s.shape) if len(s.shape) >= 2 else 1 + rng.normal(0, 0.1, s.shape))
        .astype(s.dtype), shapes)
    tokens_BT = rng.integers(0, cfg.vocab_size, (2, 8)).astype(np.int32)
    return model, params, tokens_BT, apply_kwargs(host_inputs(cfg, tokens_BT))


def naive_layer_kl(model, params, tokens_BT, extra, mask_BT, reverse=False):
    """Per token with numpy loops: rmsnorm * scale -> head -> log-softmax -> KL(early || final)
    (``reverse``: KL(final || early))."""
    cfg = model.cfg
    apply = jax.jit(model.apply, static_argnames="return_hidden")
    logits, hidden = apply({"params": params}, tokens_BT, return_hidden=True, **extra)
    logits = np.asarray(logits, np.float64)
    scale = np.asarray(params["final_norm"]["scale"], np.float64)
    head = np.asarray(params["embed"]["embedding"] if cfg.tie_embeddings else params["lm_head"]["kernel"].T,
                      np.float64)  # [V, D]
    out = []
    for h in hidden:
        h = np.asarray(h, np.float64)
        total, count = 0.0, 0.0
        for b in range(tokens_BT.shape[0]):
            for t in range(tokens_BT.shape[1]):
                x = h[b, t] / np.sqrt(np.mean(h[b, t] ** 2) + cfg.norm_eps) * scale
                early = head @ x
                lp = early - early.max() - np.log(np.sum(np.exp(early - early.max())))
                final = logits[b, t]
                lq = final - final.max() - np.log(np.sum(np.exp(final - final.max())))
                if reverse:
                    lp, lq = lq, lp
                total += mask_BT[b, t] * sum(np.exp(lp[v]) * (lp[v] - lq[v]) for v in range(len(lp)))
                count += mask_BT[b, t]
        out.append(total / count)
    return np.array(out)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_layer_kl_matches_naive_reference(variant):
    model, params, tokens_BT, extra = init(**VARIANTS[variant])
    kl = layer_kl(model, params, tokens_BT, extra)
    assert kl.shape == (3,) and kl.dtype == np.float32
    assert np.all(kl >= -1e-6)
    assert abs(kl[-1]) < 1e-5, "the last layer's early exit is the model output"
    assert kl[0] > 1e-3, "an earlier layer should disagree with the output"
    np.testing.assert_allclose(kl, naive_layer_kl(model, params, tokens_BT, extra, np.ones(tokens_BT.shape)),
                               rtol=2e-4, atol=1e-5)
    reverse = layer_kl(model, params, tokens_BT, extra, reverse=True)
    np.testing.assert_allclose(reverse, naive_layer_kl(model, params, tokens_BT, extra, np.ones(tokens_BT.shape),
                                                       reverse=True), rtol=2e-4, atol=1e-5)
    assert np.max(np.abs(reverse[:-1] - kl[:-1])) > 1e-4, "the two directions differ on random parameters"


def test_mask_weights_tokens():
    model, params, tokens_BT, extra = init()
    mask_BT = np.zeros(tokens_BT.shape, np.float32)
    mask_BT[0, :5] = 1.0
    mask_BT[1, 2] = 1.0
    np.testing.assert_allclose(layer_kl(model, params, tokens_BT, extra, mask_BT),
                               naive_layer_kl(model, params, tokens_BT, extra, mask_BT), rtol=2e-4, atol=1e-5)


def test_cli_logit_lens_end_to_end(tiny_config, tmp_path, capsys):
    from edge_jax.train.loop import train_and_evaluate
    base, deep = str(tmp_path / "base"), str(tmp_path / "deep")
    short = {"train.steps": 2, "train.warmup_steps": 1, "train.ckpt_every": 2, "train.eval_every": 2,
             "train.eval_batches": 1}
    train_and_evaluate(tiny_config(**short), base)
    train_and_evaluate(tiny_config(**short, **{"model.n_layers": 3}), deep)  # layer counts may differ
    out = tmp_path / "lens"
    assert main(["analyze", "logit-lens", "--workdir", base, deep, "--label", "base", "--label", "deep",
                 "--tokens", "300", "--out", str(out)]) == 0
    assert "base seed 0: step=2 tokens=300" in capsys.readouterr().out
    for name in ("logit_lens.md", "logit_lens.csv", "logit_lens.png"):
        assert (out / name).stat().st_size > 0
    assert not (out / "logit_lens_pairs.csv").exists(), "no --compare, no pairs"
    rows = list(csv.DictReader(open(out / "logit_lens.csv")))
    assert [(r["cell"], r["direction"], r["layer"]) for r in rows[:3]] == [
        ("base", "early||final", "0"), ("base", "early||final", "1"), ("base", "early||final", "mean")]
    assert [r["layer"] for r in rows if r["cell"] == "deep"] == ["0", "1", "2", "mean"] * 2
    kl = {(r["cell"], r["direction"], r["layer"]): float(r["mean"]) for r in rows}
    assert abs(kl["base", "early||final", "1"]) < 1e-5 and abs(kl["deep", "final||early", "2"]) < 1e-5
    assert all(r["n_seeds"] == "1" and r["std"] == "" for r in rows)
    md = (out / "logit_lens.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    assert len(table) == 2 * (3 + 1)  # per direction: one row per layer (the deeper model's 3) plus the mean
    assert table[2].startswith("| 2 |  | ")  # the 2-layer base has no layer 2

    # the same two runs as seeds 0 and 1 of two cells in a grid's layout (a copy's config says its seed)
    grid = tmp_path / "grid"
    for cell, workdir in (("base", base), ("deep", deep)):
        for seed in (0, 1):
            copy = grid / "runs" / cell / f"seed{seed}"
            shutil.copytree(workdir, copy)
            config = json.loads((copy / "config.json").read_text())
            (copy / "config.json").write_text(json.dumps({**config, "seed": seed}))
    seeds_out = tmp_path / "lens_seeds"
    assert main(["analyze", "logit-lens", "--runs", str(grid), "--compare", "base:deep", "--tokens", "300",
                 "--out", str(seeds_out)]) == 0
    printed = capsys.readouterr().out
    assert "deep seed 1: step=2 tokens=300" in printed
    d0 = kl["deep", "early||final", "0"] - kl["base", "early||final", "0"]
    verdict = "agree" if d0 > 0 else "disagree"  # identical seeds: no spread, any difference is significant
    assert f"base < deep: early||final {int(verdict == 'agree')} agree, {int(verdict == 'disagree')} disagree, " \
           "0 within noise; " in printed and "over layer 0, 2 seeds" in printed
    pairs = list(csv.DictReader(open(seeds_out / "logit_lens_pairs.csv")))
    assert [(p["direction"], p["layer"], p["n"]) for p in pairs] == [("early||final", "0", "2"),
                                                                    ("final||early", "0", "2")]
    assert float(pairs[0]["mean_diff"]) == pytest.approx(d0, rel=1e-5, abs=1e-7) and pairs[0]["verdict"] == verdict
    rows = list(csv.DictReader(open(seeds_out / "logit_lens.csv")))
    assert rows[0]["n_seeds"] == "2" and float(rows[0]["std"]) == 0.0
    assert float(rows[0]["seed1"]) == pytest.approx(kl["base", "early||final", "0"], rel=1e-5)
    assert "| layer | base (2 seeds) | deep (2 seeds) |" in (seeds_out / "logit_lens.md").read_text()
    assert (seeds_out / "logit_lens.png").stat().st_size > 0
    assert not any(f.startswith(".") for d in (out, seeds_out) for f in os.listdir(d)), "no temporary files left"


def test_cli_logit_lens_errors_are_one_line(tmp_path, capsys):
    assert main(["analyze", "logit-lens", "--workdir", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("edge-jax: error:") and "\n" not in err
    (tmp_path / "w").mkdir()
    args = ["analyze", "logit-lens", "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "o")]
    assert main(args + ["--label", "a", "--label", "b"]) == 2
    assert "--label" in capsys.readouterr().err
    assert main(args + ["--seeds", "3"]) == 2
    assert "--cells and --seeds select runs under --runs" in capsys.readouterr().err
    assert main(args + ["--compare", "meki"]) == 2
    assert "BETTER:WORSE" in capsys.readouterr().err
    assert main(["analyze", "logit-lens", "--runs", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "--runs" in capsys.readouterr().err
    assert main(["analyze", "logit-lens", "--runs", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no <cell>/seed<s> run directories" in capsys.readouterr().err
    assert main(args + ["--config.train.steps=3"]) == 2
    assert "do not apply" in capsys.readouterr().err
    # refused before the workdir is read: a missing one does not hide the misplaced override
    assert main(["analyze", "logit-lens", "--workdir", str(tmp_path / "none"), "--out", str(tmp_path / "o"),
                 "--config.seed=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "edge-jax: error: --config.* overrides do not apply to `analyze`"
    assert not (tmp_path / "o").exists()
