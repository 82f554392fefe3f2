"""Hardware-facing columns of PLM Table 5 / Table 16 for model configs: parameters, MACs and FLOPs
per token, time per layer and peak memory of a prefill.

FLOPs come from XLA's cost analysis of the compiled forward pass (a multiply-add counts 2), MACs
are FLOPs / 2; peak memory is the compiled forward's arguments + outputs + temporaries
(``memory_analysis``); time per layer is the median wall time of the forward over ``n_layers``,
timed with every config interleaved in one process (random weights: timing does not depend on them).
Used as the ``plm_arch_search`` grid's post hook (``write_arch_stats``).
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.models.count import param_breakdown
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.utils.atomic import write_text_atomic
from edge_jax.utils.timing import time_interleaved

# PLM Table 5: (layers, d_model, d_ffn, kv rank, params, MACs/param, FLOPs/param, time/layer, peak memory, loss).
PAPER_TABLE5 = [
    (28, 2816, 7040, 256, "1.54B", 0.5243, 1.261e-4, 7.3188, 7.031e-5, 2.639),
    (32, 2304, 5760, 256, "1.21B", 0.2023, 5.209e-4, 3.2364, 7.578e-5, 2.653),
    (32, 2560, 6400, 256, "1.47B", 0.1986, 3.660e-4, 3.1728, 6.595e-5, 2.659),
    (36, 2304, 5760, 256, "1.36B", 0.1806, 4.142e-4, 3.2660, 6.802e-5, 2.653),
    (40, 2304, 5760, 256, "1.51B", 0.1645, 3.365e-4, 3.2853, 7.121e-5, 2.665),
    (36, 2048, 8192, 256, "1.55B", 0.1785, 3.512e-4, 3.2225, 7.184e-5, 2.632),
    (32, 2048, 8192, 512, "1.54B", 0.1722, 4.214e-4, 2.7499, 6.687e-5, 2.634),
]


def forward_stats(cfgs: dict[str, ModelConfig], seq_len: int = 128, repeats: int = 5) -> dict[str, dict]:
    """Per config: params, FLOPs and MACs per token, peak bytes, seconds per layer (batch 1)."""
    tokens = jnp.zeros((1, seq_len), jnp.int32)
    out, runs = {}, {}
    for name, cfg in cfgs.items():
        model = DecoderLM(cfg)
        params = model.init(jax.random.key(0), tokens)
        compiled = jax.jit(model.apply).lower(params, tokens).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        mem = compiled.memory_analysis()
        counts = param_breakdown(cfg)
        flops = float(cost["flops"]) / seq_len
        out[name] = {"params": counts["total"], "non_embedding": counts["non_embedding"],
                     "flops_per_token": flops, "macs_per_token": flops / 2,
                     "peak_bytes": int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)}
        runs[name] = (lambda c=compiled, p=params: c(p, tokens))
    seconds = time_interleaved(runs, repeats, 1)
    for name, cfg in cfgs.items():
        out[name]["time_per_layer_s"] = seconds[name] / cfg.n_layers
    return out


def _resolved_model(record: dict) -> dict:
    from edge_jax.grid.runner import resolved_vocab_size
    return {**record["config"]["model"], "vocab_size": resolved_vocab_size(record)}


def write_arch_stats(grid, records: list[dict], out) -> list[Path]:
    """Grid post hook: ``arch_stats.md`` beside the grid's table."""
    by_cell: dict[str, list[dict]] = {}
    for r in records:
        by_cell.setdefault(r["cell"], []).append(r)
    cells = [c for c in grid.cells if c in by_cell]
    cfgs = {c: ModelConfig.from_config(_resolved_model(by_cell[c][0])) for c in cells}
    seq_len = int(by_cell[cells[0]][0]["config"]["data"]["seq_len"])
    stats = forward_stats(cfgs, seq_len)
    lines = [f"# {grid.title}: hardware columns", "",
             f"Forward pass of one sequence of {seq_len} tokens on {jax.devices()[0].platform} "
             f"({jax.devices()[0].device_kind}); FLOPs from XLA's cost analysis, MACs = FLOPs / 2, peak memory = "
             "arguments + outputs + temporaries of the compiled forward, time per layer = median forward time / "
             "layers (cells interleaved). Loss: mean validation loss over seeds.", "",
             "| cell | layers | d_model | kv rank | params | non-emb. | MACs/token | FLOPs/token | MACs/param "
             "| time/layer (ms) | peak memory (MB) | val_loss |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cells:
        s, m = stats[c], cfgs[c]
        loss = np.mean([float(r["metrics"][grid.metric]) for r in by_cell[c]])
        lines.append(f"| {c} | {m.n_layers} | {m.d_model} | {m.kv_lora_rank} | {s['params']:,} "
                     f"| {s['non_embedding']:,} | {s['macs_per_token']:,.0f} | {s['flops_per_token']:,.0f} "
                     f"| {s['macs_per_token'] / s['params']:.3f} | {1e3 * s['time_per_layer_s']:.3f} "
                     f"| {s['peak_bytes'] / 2**20:.2f} | {loss:.4f} |")
    lines += ["",
              "PLM Table 5 (1.2-1.55B candidates, 100B tokens; time and memory on a Raspberry Pi, units as printed):",
              "",
              "| layers | d_model | d_ffn | kv rank | params | MACs/param | FLOPs/param | time/layer "
              "| peak memory | loss |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in PAPER_TABLE5]
    path = Path(out) / "arch_stats.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return [path]
