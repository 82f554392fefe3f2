"""``edge-jax hf import|export`` on random tiny transformers checkpoints: parity, bit-exact bfloat16, shards,
the workdir every command takes, and each bad input refused in one line with nothing left behind."""
import json
import os
import re

import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402

from edge_jax.cli import main  # noqa: E402
from edge_jax.interop.safetensors_io import Checkpoint  # noqa: E402

TINY = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=96, max_position_embeddings=128)


def _save(path, kind="qwen3", dtype=torch.float32, tokenizer=False, shard=None, **kw):
    torch.manual_seed(0)
    cls, config_cls = {"qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config),
                       "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig)}[kind]
    model = cls(config_cls(**{**TINY, "tie_word_embeddings": False, **kw})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model = model.to(dtype)
    model.save_pretrained(path, **({"max_shard_size": shard} if shard else {}))
    if tokenizer:
        _word_tokenizer().save(os.path.join(path, "tokenizer.json"))
    return model


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i + 2 for i in range(200)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "qwen3"
    return path, _save(path)


def test_import_check_export_and_transformers_loads_it(qwen3_dir, tmp_path, capsys):
    src, model = qwen3_dir
    code, out, err = _run(capsys, "hf", "import", src, "--workdir", tmp_path / "w", "--check")
    assert code == 0, err
    assert "no tokenizer files" in out and "byte tokenizer" in out
    delta = float(re.search(r"max \|Δ logits\| = (\S+) over (\d+) tokens \(transformers ", out).group(1))
    assert delta <= 1e-4
    code, out, err = _run(capsys, "hf", "export", "--workdir", tmp_path / "w", "--out", tmp_path / "out")
    assert code == 0, err
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    tokens = np.random.default_rng(0).integers(0, 300, size=(2, 40))
    assert np.max(np.abs(_logits(back, tokens) - _logits(model, tokens))) <= 1e-5


def test_bfloat16_imports_and_exports_bit_exact_with_its_tokenizer(tmp_path, capsys):
    _save(tmp_path / "src", "llama", torch.bfloat16, tokenizer=True)
    assert _run(capsys, "hf", "import", tmp_path / "src", "--workdir", tmp_path / "w")[0] == 0
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    assert config["model"]["param_dtype"] == "bfloat16"
    assert config["data"]["tokenizer"] == f"hf:{tmp_path / 'w' / 'hf' / 'tokenizer.json'}"
    assert _run(capsys, "hf", "export", "--workdir", tmp_path / "w", "--out", tmp_path / "out")[0] == 0
    a, b = Checkpoint(str(tmp_path / "src")), Checkpoint(str(tmp_path / "out"))
    assert sorted(a.names()) == sorted(b.names())
    for name in a.names():
        assert b.dtype(name) == a.dtype(name)
        assert a.read(name).tobytes() == b.read(name).tobytes(), name
    assert (tmp_path / "out" / "tokenizer.json").exists()


def test_sharded_checkpoints_in_and_out(tmp_path, capsys):
    from edge_jax.hf.exporter import export_workdir

    model = _save(tmp_path / "src", shard="100KB")
    assert (tmp_path / "src" / "model.safetensors.index.json").exists()
    assert _run(capsys, "hf", "import", tmp_path / "src", "--workdir", tmp_path / "w")[0] == 0
    out = export_workdir(str(tmp_path / "w"), str(tmp_path / "out"), max_shard_bytes=100_000)
    assert out["files"] > 1 and (tmp_path / "out" / "model.safetensors.index.json").exists()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    tokens = np.random.default_rng(1).integers(0, 300, size=(1, 16))
    assert np.max(np.abs(_logits(back, tokens) - _logits(model, tokens))) <= 1e-5


def test_an_import_is_a_base_that_train_eval_and_params_take(qwen3_dir, tmp_path, capsys):
    src, _ = qwen3_dir
    w = tmp_path / "w"
    assert _run(capsys, "hf", "import", src, "--workdir", w)[0] == 0
    code, out, err = _run(capsys, "eval", "--workdir", w, "--batches", "1")
    assert code == 0 and "val_loss=" in out, err
    code, out, err = _run(capsys, "params", "--config", f"configs/hf.py:base={w}")
    assert code == 0 and "100,224" in out.replace(" ", ""), out
    code, out, err = _run(capsys, "train", "--config", f"configs/hf.py:base={w}", "--workdir", w)
    assert code == 2 and "a base to start from" in err


def _bad_dir(tmp_path, qwen3_dir, what):
    """A copy of the saved checkpoint with one thing wrong."""
    import shutil

    from safetensors.numpy import load_file, save_file

    src, _ = qwen3_dir
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    weights, config = bad / "model.safetensors", bad / "config.json"
    c = json.loads(config.read_text())
    tensors = load_file(weights) if what in ("missing", "extra", "dtype") else None
    if what == "no-config":
        config.unlink()
    elif what == "no-weights":
        weights.unlink()
    elif what == "model-type":
        c["model_type"] = "gpt2"
    elif what == "shape":
        c["intermediate_size"] = 80
    elif what == "rope":
        c["rope_parameters"] = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    elif what == "missing":
        tensors.pop("model.norm.weight")
    elif what == "extra":
        tensors["model.layers.0.mlp.extra.weight"] = np.ones((2, 2), np.float32)
    elif what == "dtype":
        tensors["model.norm.weight"] = tensors["model.norm.weight"].astype(np.int8)
    elif what == "truncated":
        size = os.path.getsize(weights)
        with open(weights, "r+b") as f:
            f.truncate(size - 100)
    if tensors is not None:
        save_file(tensors, weights)
    if config.exists():
        config.write_text(json.dumps(c))
    return bad


BAD = {"no-config": "no config.json", "no-weights": "no *.safetensors", "model-type": "unsupported model_type 'gpt2'",
       "shape": "has shape", "rope": "rope_type='dynamic'", "missing": "missing tensor 'model.norm.weight'",
       "extra": "unexpected tensor 'model.layers.0.mlp.extra.weight'", "dtype": "dtype I8", "truncated": "truncated"}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_checkpoints_are_refused_in_one_line_leaving_nothing(qwen3_dir, tmp_path, capsys, what):
    bad = _bad_dir(tmp_path, qwen3_dir, what)
    before = set(os.listdir(tmp_path))
    code, out, err = _run(capsys, "hf", "import", bad, "--workdir", tmp_path / "w")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edge-jax: error:") and BAD[what] in lines[0], err
    assert set(os.listdir(tmp_path)) == before  # no workdir, no temporary directory


def test_workdir_and_export_refusals(qwen3_dir, tmp_path, capsys):
    src, _ = qwen3_dir
    w = tmp_path / "w"
    assert _run(capsys, "hf", "import", src, "--workdir", w)[0] == 0
    code, _, err = _run(capsys, "hf", "import", src, "--workdir", w)
    assert code == 2 and "already exists and is not empty" in err
    code, _, err = _run(capsys, "hf", "export", "--workdir", w, "--out", tmp_path / "o", "--step", "7")
    assert code == 2 and "no checkpoint at --step 7; its steps: 0" in err and not (tmp_path / "o").exists()
    config = json.loads((w / "config.json").read_text())
    config["mesh"]["fsdp"] = 64  # trained on a larger mesh than this host has: still exports
    (w / "config.json").write_text(json.dumps(config))
    code, _, err = _run(capsys, "hf", "export", "--workdir", w, "--out", tmp_path / "big_mesh")
    assert code == 0, err
    config["model"]["memory"] = "meki"
    (w / "config.json").write_text(json.dumps(config))
    code, _, err = _run(capsys, "hf", "export", "--workdir", w, "--out", tmp_path / "o")
    assert code == 2 and "model.memory='meki'" in err and "no HF form" in err and not (tmp_path / "o").exists()


def test_a_meki_model_exports_its_folded_tables_beside_the_decoder_and_imports_back(tiny_config, tmp_path, capsys):
    import flax.linen as nn
    import jax

    from edge_jax.models.decoder import DecoderLM
    from edge_jax.models.inference import inference_form
    from edge_jax.train.init_from import restore_params
    from edge_jax.train.loop import train_and_evaluate
    from edge_jax.train.setup import model_config

    run = tmp_path / "meki"
    train_and_evaluate(tiny_config(**{"model.memory": "meki", "model.d_mem": 16, "train.steps": 2,
                                      "train.warmup_steps": 1, "train.eval_every": 2, "train.eval_batches": 1}),
                       str(run))
    code, _, err = _run(capsys, "hf", "export", "--workdir", run, "--out", tmp_path / "plain")
    assert code == 2 and "model.memory='meki'" in err and "--memory-tables" in err
    code, out, err = _run(capsys, "hf", "export", "--workdir", run, "--out", tmp_path / "out", "--memory-tables")
    assert code == 0 and "memory tensors beside them" in out, err
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # the decoder alone loads
    assert _run(capsys, "hf", "import", tmp_path / "out", "--workdir", tmp_path / "back")[0] == 0
    params, config = restore_params(str(run))
    folded, folded_cfg = inference_form(nn.unbox(params), model_config(config))
    back, back_config = restore_params(str(tmp_path / "back"))
    back_cfg = model_config(back_config)
    assert back_cfg.memory == "meki" and back_cfg.meki_folded
    tokens = np.random.default_rng(0).integers(0, 258, size=(2, 16)).astype(np.int32)
    want = np.asarray(jax.jit(DecoderLM(folded_cfg).apply)({"params": folded}, tokens))  # jitted: one compile
    got = np.asarray(jax.jit(DecoderLM(back_cfg).apply)({"params": back}, tokens))
    np.testing.assert_array_equal(got, want)
