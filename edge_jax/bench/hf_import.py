"""``edge-jax bench import``: peak memory of ``edge-jax hf import`` on a generated checkpoint larger than
it should ever hold (default 6 GB of bfloat16 in the Llama layout, 2 GB shards with their index).

Each round imports the checkpoint in a fresh process (``edge-jax hf import``) and reads that process's
peak RSS from the kernel; a process that only imports the same modules gives the fixed cost. The
report: checkpoint size, largest tensor, peak RSS (median and spread over rounds), peak over checkpoint
size, and the wall time.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np

D, HEADS, KV, HEAD_DIM, FF, VOCAB = 2048, 16, 8, 128, 8192, 32000


def _hf_config(layers: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": D,
            "num_hidden_layers": layers, "num_attention_heads": HEADS, "num_key_value_heads": KV,
            "head_dim": HEAD_DIM, "intermediate_size": FF, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
            "rope_theta": 500000.0, "hidden_act": "silu", "torch_dtype": "bfloat16"}


def _tensors(layers: int) -> list[tuple[str, tuple, np.dtype]]:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    out = [("model.embed_tokens.weight", (VOCAB, D), bf16)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (D,), bf16), (p + "post_attention_layernorm.weight", (D,), bf16),
                (p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, D), bf16),
                (p + "self_attn.k_proj.weight", (KV * HEAD_DIM, D), bf16),
                (p + "self_attn.v_proj.weight", (KV * HEAD_DIM, D), bf16),
                (p + "self_attn.o_proj.weight", (D, HEADS * HEAD_DIM), bf16),
                (p + "mlp.gate_proj.weight", (FF, D), bf16), (p + "mlp.up_proj.weight", (FF, D), bf16),
                (p + "mlp.down_proj.weight", (D, FF), bf16)]
    return out + [("model.norm.weight", (D,), bf16), ("lm_head.weight", (VOCAB, D), bf16)]


def generate(directory: str, size_gb: float, shard_gb: float = 2.0) -> tuple[int, int]:
    """Write a random bfloat16 Llama-layout checkpoint of about ``size_gb`` GB; ``(bytes, largest tensor bytes)``."""
    from edge_jax.interop.safetensors_io import write_shards

    per_layer = sum(int(np.prod(s)) * 2 for n, s, _ in _tensors(1) if ".layers." in n)
    layers = max(1, -int(-(size_gb * 1e9 - 2 * VOCAB * D * 2) // per_layer))  # at least size_gb
    items = _tensors(layers)
    block = np.random.default_rng(0).standard_normal(2**20).astype(ml_dtypes.bfloat16) * 0.02

    def arrays():
        for _, shape, dtype in items:
            n = int(np.prod(shape))
            yield np.resize(block, n).reshape(shape)

    os.makedirs(directory, exist_ok=True)
    write_shards(directory, items, arrays, int(shard_gb * 1e9))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(_hf_config(layers), f)
    sizes = [int(np.prod(s)) * d.itemsize for _, s, d in items]
    return sum(sizes), max(sizes)


def _measure(argv: list[str]) -> tuple[float, float]:
    """Peak RSS and wall time of ``argv``, measured by a helper process whose only child it is."""
    code = ("import resource, subprocess, sys, time, json; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, "
            "time.perf_counter() - t, p.stderr[-400:]]))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    rc, peak, seconds, err = json.loads(out.stdout.strip().splitlines()[-1])
    if rc:
        raise RuntimeError(f"{' '.join(argv[2:6])} failed (exit {rc}): {err.strip().splitlines()[-1:]}")
    return float(peak), float(seconds)


def run(args, overrides) -> str:
    root = tempfile.mkdtemp(prefix="edge_jax_bench_import_", dir=args.dir)
    try:
        src = os.path.join(root, "hf")
        t0 = time.perf_counter()
        total, largest = generate(src, args.size_gb)
        made = time.perf_counter() - t0
        base_peak, _ = _measure([sys.executable, "-c", "import jax, edge_jax.hf.importer, edge_jax.cli; "
                                 "jax.numpy.zeros(1).block_until_ready()"])
        peaks, times = [], []
        for r in range(args.repeats):
            work = os.path.join(root, f"w{r}")
            peak, seconds = _measure([sys.executable, "-m", "edge_jax.cli", "hf", "import", src, "--workdir", work])
            peaks.append(peak)
            times.append(seconds)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    gb = 1e9
    med = statistics.median(peaks)
    return "\n".join([
        f"import benchmark: generated bfloat16 Llama-layout checkpoint of {total / gb:.2f} GB (largest tensor "
        f"{largest / 2**20:.0f} MiB) in {made:.0f} s; {args.repeats} import(s), each a fresh process",
        f"  peak RSS of edge-jax hf import: median {med / gb:.3f} GB (min {min(peaks) / gb:.3f}, max "
        f"{max(peaks) / gb:.3f}); the same modules imported alone: {base_peak / gb:.3f} GB",
        f"  peak / checkpoint size: {med / total:.3f}; goal: peak <= 1.5 GB",
        f"  wall time: median {statistics.median(times):.1f} s (min {min(times):.1f}, max {max(times):.1f}), "
        f"{total / gb / statistics.median(times):.2f} GB/s",
    ])
