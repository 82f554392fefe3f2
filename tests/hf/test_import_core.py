"""``edge-jax hf import | export`` with the core install only (no torch, no transformers, no safetensors): a
Llama-layout checkpoint written by our own safetensors writer goes in and comes back out bit for bit."""
import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
from helpers import compile_flags, needs_extra

from edge_jax.cli import main
from edge_jax.interop.safetensors_io import Checkpoint, write_shards

D, H, G, K, F, V, L = 32, 4, 2, 8, 48, 272, 2
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V, "hidden_size": D,
          "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G, "head_dim": K,
          "intermediate_size": F, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
          "hidden_act": "silu", "torch_dtype": "bfloat16"}


def _tensors():
    out = [("model.embed_tokens.weight", (V, D))]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (D,)), (p + "post_attention_layernorm.weight", (D,)),
                (p + "self_attn.q_proj.weight", (H * K, D)), (p + "self_attn.k_proj.weight", (G * K, D)),
                (p + "self_attn.v_proj.weight", (G * K, D)), (p + "self_attn.o_proj.weight", (D, H * K)),
                (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.up_proj.weight", (F, D)),
                (p + "mlp.down_proj.weight", (D, F))]
    return out + [("model.norm.weight", (D,))]


def _write(directory, max_shard_bytes):
    bf16 = np.dtype(ml_dtypes.bfloat16)
    items = [(n, s, bf16) for n, s in _tensors()]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(bf16) for _, s, _ in items]
    directory.mkdir()
    write_shards(str(directory), items, lambda: iter(arrays), max_shard_bytes)
    (directory / "config.json").write_text(json.dumps(CONFIG))


def test_import_and_export_without_the_interop_extra(tmp_path, capsys):
    _write(tmp_path / "src", max_shard_bytes=20_000)
    assert (tmp_path / "src" / "model.safetensors.index.json").exists()
    assert main(["hf", "import", str(tmp_path / "src"), "--workdir", str(tmp_path / "w")]) == 0
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    assert config["model"]["param_dtype"] == "bfloat16" and config["data"]["tokenizer"] == "byte"
    assert main(["hf", "export", "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "out")]) == 0
    a, b = Checkpoint(str(tmp_path / "src")), Checkpoint(str(tmp_path / "out"))
    assert sorted(a.names()) == sorted(b.names())
    for name in a.names():
        assert a.read(name).tobytes() == b.read(name).tobytes(), name
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert exported["model_type"] == "llama" and exported["num_hidden_layers"] == L


@needs_extra("gcsfs")
def test_import_into_a_bucket_trains_from_it_and_exports_back_bit_for_bit(tmp_path):
    """A base imported into a bucket (``--workdir gs://...``), its tokenizer read from there by a run that starts
    from it, and exported back: each an ``edge-jax`` process, as on a pod's hosts."""
    from gcs import emulator
    from tokenizers import Tokenizer, models, pre_tokenizers
    _write(tmp_path / "src", max_shard_bytes=20_000)
    words = Tokenizer(models.WordLevel({"<unk>": 0, "</s>": 1, **{f"w{i}": i + 2 for i in range(200)}},
                                       unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.save(str(tmp_path / "src" / "tokenizer.json"))

    def edge_jax(*argv):
        run = subprocess.run([sys.executable, "-m", "edge_jax.cli", *map(str, argv)], capture_output=True,
                             text=True, env=dict(os.environ, XLA_FLAGS=compile_flags()))
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]

    with emulator() as bucket:
        base = f"{bucket}/bases/llama"
        edge_jax("hf", "import", tmp_path / "src", "--workdir", base)
        from edge_jax.utils.storage import epath, files_under
        config = json.loads(epath(f"{base}/config.json").read_text())
        assert config["data"]["tokenizer"] == f"hf:{base}/hf/tokenizer.json"
        assert "checkpoints/0/commit_success.txt" in files_under(base)  # a step in a bucket: committed by this file
        edge_jax("train", "--config", f"configs/hf.py:base={base}", "--workdir", f"{bucket}/ft",
                 "--config.train.steps=2", "--config.train.warmup_steps=1", "--config.train.eval_every=2",
                 "--config.train.eval_batches=1", "--config.data.seq_len=16", "--config.data.batch_size=2")
        assert json.loads(epath(f"{bucket}/ft/tokenizer.json").read_text())["name"].startswith("hf-hf-")
        edge_jax("hf", "export", "--workdir", base, "--out", tmp_path / "out")
    a, b = Checkpoint(str(tmp_path / "src")), Checkpoint(str(tmp_path / "out"))
    assert sorted(a.names()) == sorted(b.names())
    for name in a.names():
        assert a.read(name).tobytes() == b.read(name).tobytes(), name
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (tmp_path / "src" / "tokenizer.json").read_bytes()
