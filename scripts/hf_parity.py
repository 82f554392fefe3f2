"""The families table of docs/interop.md, measured: for each HF family a random tiny model built by
transformers from a config (no download), saved, then ``edge-jax hf import --check``, ``edge-jax hf
export``, transformers loading the export, and greedy decoding with our KV cache against ``generate``.

    .venv/bin/python scripts/hf_parity.py            # prints the markdown table (about 2 minutes on 2 cores)
"""
from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

from edge_jax.cli import main
from edge_jax.infer.decode import greedy_decode
from edge_jax.models.decoder import DecoderLM
from edge_jax.train.init_from import restore_params
from edge_jax.train.setup import model_config

V = 300
BASE = dict(vocab_size=V, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=96, max_position_embeddings=128, tie_word_embeddings=False)
MOE = dict(moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1])
CASES = {  # name: (model_type, config, what it exercises)
    "qwen3": ("qwen3", BASE, "QK-norm"),
    "llama": ("llama", dict(BASE, rope_parameters=dict(rope_type="llama3", rope_theta=500_000.0, factor=8.0,
                                                        low_freq_factor=1.0, high_freq_factor=4.0,
                                                        original_max_position_embeddings=32)),
              "llama3 RoPE scaling, 32 original positions"),
    "qwen2": ("qwen2", BASE, "q/k/v biases"),
    "qwen3_moe": ("qwen3_moe", dict(BASE, **MOE), "softmax top-2 of 8, norm_topk_prob, a dense layer"),
    "phimoe": ("phimoe", dict(BASE, num_local_experts=4, num_experts_per_tok=2, attention_bias=True,
                              lm_head_bias=True, rms_norm_eps=1e-5),
               "SparseMixer, LayerNorm, attention and head biases"),
    "deepseek_v2": ("deepseek_v2", dict(BASE, kv_lora_rank=24, qk_nope_head_dim=16, v_head_dim=16,
                                        qk_rope_head_dim=8, moe_intermediate_size=32, n_routed_experts=8,
                                        n_shared_experts=2, num_experts_per_tok=3, topk_method="group_limited_greedy",
                                        n_group=4, topk_group=2, routed_scaling_factor=1.7, first_k_dense_replace=1,
                                        q_lora_rank=None, rms_norm_eps=1e-6, num_key_value_heads=4,
                                        rope_parameters=dict(rope_type="yarn", rope_theta=10_000.0, factor=4.0,
                                                             original_max_position_embeddings=32, mscale=1.0,
                                                             mscale_all_dim=0.5)),
                    "MLA, 2 shared + 8 routed experts, group-limited top-3, YaRN, 32 original positions"),
}


def build(model_type: str, config: dict):
    torch.manual_seed(0)
    c = transformers.AutoConfig.for_model(model_type, **config)
    model = transformers.AutoModelForCausalLM.from_config(c, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # norms off 1, biases off 0: every term counts
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model


def logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def quiet(*argv) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in argv])
    if code:
        raise SystemExit(f"edge-jax {' '.join(map(str, argv))} exited {code}")
    return out.getvalue()


def row(name: str, root: Path) -> str:
    model_type, config, what = CASES[name]
    model = build(model_type, config)
    model.save_pretrained(root / f"{name}_hf")
    line = quiet("hf", "import", root / f"{name}_hf", "--workdir", root / name, "--check")
    check = re.search(r"max \|Δ logits\| = (\S+) over (\d+) tokens", line)
    quiet("hf", "export", "--workdir", root / name, "--out", root / f"{name}_out")
    back = transformers.AutoModelForCausalLM.from_pretrained(root / f"{name}_out", dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    tokens = np.random.default_rng(2).integers(0, V, size=(2, 48))
    exported = float(np.max(np.abs(logits(back, tokens) - logits(model, tokens))))
    params, run_config = restore_params(str(root / name))
    prompt = np.random.default_rng(3).integers(0, V, size=(2, 8))
    ours = greedy_decode(DecoderLM(model_config(run_config)), params, prompt.astype(np.int32), 16)
    with torch.no_grad():
        theirs = model.generate(torch.from_numpy(prompt), max_new_tokens=16, min_new_tokens=16, do_sample=False,
                                pad_token_id=0, eos_token_id=None)[:, 8:].numpy()
    greedy = f"{int(np.sum(ours == theirs))}/{ours.size}"
    return (f"| {name} | {what} | {check.group(1)} ({check.group(2)} tokens) | {exported:.2g} | {greedy} |")


def run(names) -> None:
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, float32, CPU\n")
    print("| family | tiny model exercises | `hf import --check`: max \\|Δ logits\\| | export loaded by "
          "transformers: max \\|Δ logits\\| vs the original | greedy tokens equal to `generate` |")
    print("|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(row(name, Path(tmp)), flush=True)


if __name__ == "__main__":
    run(sys.argv[1:] or list(CASES))
