"""The papers' procedures on imported HF models (tiny random ones, saved by transformers): EdgeInfinite's
gate on a frozen imported base, PLM's sparsity analysis on a SwiGLU import, NPUMoE's calibration, plan
and routing trace on an imported MoE replayed by the expert-cache simulator, and the real models' sizes."""
import json
import os

import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402

from edge_jax.cli import main  # noqa: E402
from edge_jax.config import load_config  # noqa: E402

TINY = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=96, max_position_embeddings=512, tie_word_embeddings=False)
BUILD = {"qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config, {}),
         "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
         "qwen3_moe": (transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig,
                       dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)),
         "phimoe": (transformers.PhimoeForCausalLM, transformers.PhimoeConfig,
                    dict(num_local_experts=8, num_experts_per_tok=2, attention_bias=True, lm_head_bias=True))}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_JAX_DATA", os.environ.get("EDGE_JAX_TEST_DATA", str(tmp_path / "data")))


def _imported(tmp_path, kind: str) -> str:
    torch.manual_seed(0)
    cls, config_cls, extra = BUILD[kind]
    cls(config_cls(**TINY, **extra)).eval().save_pretrained(tmp_path / f"{kind}_hf")
    work = tmp_path / kind
    assert main(["hf", "import", str(tmp_path / f"{kind}_hf"), "--workdir", str(work)]) == 0
    return str(work)


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": np.asarray(v)})
    return out


# One family per procedure in the fast tier: the procedures do not branch on the family, and every family's
# import is compared with transformers in tests/interop; the other families run with -m slow.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("kind", ["qwen3", pytest.param("llama", marks=SLOW)])
def test_edgeinfinite_gate_trains_on_a_frozen_imported_base(tmp_path, kind):
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.loop import train_and_evaluate

    base = _imported(tmp_path, kind)
    config = load_config(f"configs/edgeinfinite.py:base={base}", {
        "model.infini_sink": 4, "model.infini_window": 4, "model.infini_segment": 8, "model.infini_hidden": 8,
        "data.seq_len": 40, "data.batch_size": 4, "train.steps": 3, "train.warmup_steps": 1, "train.eval_every": 3,
        "train.eval_batches": 1, "mesh.data": 1, "longctx.lengths": (256,), "longctx.near_lengths": (),
        "longctx.examples": 1, "longctx.tasks": ("passkey",), "longctx.answer_tokens": 2})
    assert config.init_from == base and config.model.d_model == 64
    result = train_and_evaluate(config, str(tmp_path / "gate"))
    assert 0 < result["trained_fraction"] < 0.2 and result["longctx/prompts"] == 1  # Table 1's harness scored it
    before, after = _flat(restore_params(base)[0]), _flat(restore_params(str(tmp_path / "gate"))[0])
    gate = [k for k in after if "memory_gate" in k]
    assert gate and set(after) - set(gate) == set(before)
    for key, value in before.items():  # the base is bitwise frozen
        assert value.tobytes() == after[key].tobytes(), key
    assert any(np.abs(after[k]).max() > 0 for k in gate if k.endswith("/g"))


@pytest.mark.parametrize("kind", ["qwen3", pytest.param("llama", marks=SLOW)])
def test_plm_sparsity_analysis_on_an_imported_swiglu_model(tmp_path, kind, capsys):
    base = _imported(tmp_path, kind)
    out = tmp_path / "sparsity"
    assert main(["analyze", "sparsity", "--workdir", base, "--batches", "1", "--ratios", "0,0.5,0.9",
                 "--out", str(out)]) == 0
    assert (out / "sparsity.md").exists() and (out / "sparsity.csv").exists()


@pytest.mark.parametrize("kind", ["qwen3_moe", pytest.param("phimoe", marks=SLOW)])
def test_npumoe_calibrate_plan_trace_and_cache_replay_on_an_imported_moe(tmp_path, capsys, kind):
    from edge_jax.train.loop import train_and_evaluate

    base = _imported(tmp_path, kind)
    assert main(["moe", "calibrate", "--workdir", base, "--batches", "2", "--second-data", "facts"]) == 0
    plan = os.path.join(base, "calibration.json")
    assert os.path.exists(plan)
    small = {"data.seq_len": 64, "data.batch_size": 4, "train.steps": 0, "train.eval_batches": 2, "mesh.data": 1}
    dropless = train_and_evaluate(load_config(f"configs/npumoe.py:base={base},strategy=dropless", small),
                                  str(tmp_path / "dropless"))
    npumoe = train_and_evaluate(load_config(f"configs/npumoe.py:base={base},strategy=npumoe",
                                            {**small, "moe.plan": plan}), str(tmp_path / "npumoe"))
    assert np.isfinite(npumoe["val_loss"]) and abs(npumoe["val_loss"] - dropless["val_loss"]) < 0.5
    capsys.readouterr()
    assert main(["moe", "trace", "--workdir", base, "--batches", "1", "--out", str(tmp_path / "trace")]) == 0
    trace = next(p for p in (tmp_path / "trace").iterdir() if p.suffix == ".npz")
    assert main(["cache", "run", "--config", "configs/cache.py:trace=real", "--workdir", str(tmp_path / "cache"),
                 f"--config.trace.path={trace}", "--config.scoutgate.steps=20", "--config.scoutgate.batch=64"]) == 0
    metrics = json.loads((tmp_path / "cache" / "final_metrics.json").read_text())
    assert metrics and all(np.isfinite(v) for v in metrics.values() if isinstance(v, float))


@pytest.mark.parametrize("name,total", [("phi-3.5-moe", 41_873_153_344), ("qwen3-30b-a3b", 30_532_122_624)])
def test_real_models_sized_from_their_config(name, total, capsys):
    """The counts of the published configs (docs/interop.md compares them with NPUMoE's Table 1)."""
    assert main(["params", "--config", f"configs/hf.py:hf=configs/hf/{name}.json"]) == 0
    out = capsys.readouterr().out
    assert f"total (train): {total / 1e9:.4f}B ({total:,})" in out, out
