"""``edge-jax bench NAME``: benchmarks that time competing implementations in one run and print ratios."""
from __future__ import annotations

import argparse

BENCHMARKS = {
    "train-step": "edge_jax.bench.train_step",
    "meki-decode": "edge_jax.papers.meki.bench",
    "mla-decode": "edge_jax.papers.plm.bench",
    "long-context": "edge_jax.papers.edgeinfinite.bench",
    "moe": "edge_jax.papers.npumoe.bench",
    "cache-sim": "edge_jax.papers.expert_cache.bench",
}
DEFAULT_REPEATS = {"long-context": 1}  # --repeats when not given (5 for the others)
DEFAULT_CHUNK = {"moe": 512}  # --chunk when not given (2048 for the others)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("--config", default="configs/lm.py:size=tiny", help="path/to/config.py[:arg] (train-step)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (median reported; default 5, "
                        "long-context 1)")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round (train-step)")
    g = parser.add_argument_group("meki-decode", "model size (default: d_model 512, 8 layers, 8/4 heads x 64, "
                                  "d_ff 1536, vocab 32000, d_mem 64) and decoding shape")
    g.add_argument("--preset", default=None, help="a size from edge_jax.models.presets.MODEL_SIZES, e.g. qwen3_0p6b "
                   "(d_mem then defaults to MeKi Table 5: 128 / 256 / 512 for 0.6B / 1.7B / 4B)")
    for flag, help_ in (("--d-model", "model width"), ("--layers", "number of layers"), ("--heads", "query heads"),
                        ("--kv-heads", "key/value heads"), ("--head-dim", "head width"), ("--d-ff", "FFN width"),
                        ("--vocab", "vocabulary size"), ("--d-mem", "MeKi memory width")):
        g.add_argument(flag, type=int, default=None, help=help_)
    g.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    g.add_argument("--prompt", type=int, default=64, help="prompt tokens (prefilled, not timed)")
    g.add_argument("--new-tokens", type=int, default=128, help="decode steps per timed round")
    g.add_argument("--dtype", default="float32", help="compute and parameter dtype (float32, bfloat16, float16)")
    g = parser.add_argument_group("mla-decode", "MLA (naive, absorbed) vs its MHA twin. Also takes --d-model, "
                                  "--layers, --heads, --kv-heads (the twin's; default --heads), --head-dim, --d-ff, "
                                  "--vocab, --batch, --dtype, --repeats; default shape: d_model 2048, 2 layers, 16 "
                                  "heads x 128, d_ff 2048, vocab 4096")
    g.add_argument("--d-rope", type=int, default=None, help="MLA RoPE key width (default 64)")
    g.add_argument("--kv-lora-rank", type=int, default=None, help="MLA latent width d_c (default 512)")
    g.add_argument("--contexts", default="1024,4096,8192", help="comma-separated cache fill levels")
    g.add_argument("--decode-steps", type=int, default=4, help="decode steps per timed round")
    g = parser.add_argument_group("long-context", "EdgeInfinite Fig. 3: TTFT and peak memory vs input length, "
                                  "EdgeInfinite vs FullKV. Also takes --d-model, --layers, --heads, --kv-heads, "
                                  "--head-dim, --d-ff, --vocab, --batch, --dtype, --repeats (default 1); default "
                                  "shape: d_model 128, 2 layers, 4/2 heads x 32, d_ff 256, vocab 256")
    g.add_argument("--lengths", default="2048,4096,8192,16384,32768,65536", help="comma-separated input lengths")
    g.add_argument("--sink", type=int, default=300, help="EdgeInfinite sink tokens")
    g.add_argument("--window", type=int, default=200, help="EdgeInfinite window tokens (<= --segment)")
    g.add_argument("--segment", type=int, default=2048, help="EdgeInfinite segment length")
    g.add_argument("--chunk", type=int, default=None, help="FullKV prefill chunk (default 2048; moe: tokens per "
                   "prefill chunk, default 512)")
    g.add_argument("--max-fullkv-length", type=int, default=None, help="skip FullKV above this length "
                   "(default: run it at every length; its cost is quadratic)")
    g.add_argument("--plot", default=None, help="write a two-panel PNG (TTFT, peak memory vs length) here")
    g.add_argument("--json", default=None, help="write the measurements as JSON here")
    g = parser.add_argument_group("moe", "NPUMoE Fig. 17 ablation and Table 5 grouping on one synthetic MoE layer. "
                                  "Also takes --d-model (default 128), --d-ff (expert width, default 128), --chunk "
                                  "(default 512), --repeats, --json")
    g.add_argument("--experts", type=int, default=16, help="routed experts")
    g.add_argument("--top-k", type=int, default=2, help="experts per token")
    g.add_argument("--chunks", type=int, default=4, help="prefill chunks per timed round")
    g.add_argument("--zipf", type=float, default=1.0, help="router skew: expert popularity ~ 1 / rank^zipf")
    g.add_argument("--group", type=int, default=4, help="experts per grouped call")
    g = parser.add_argument_group("cache-sim", "accesses per second of every expert-cache policy on a synthetic "
                                  "trace. Also takes --layers (default 4), --experts, --top-k, --json")
    g.add_argument("--accesses", type=int, default=1_000_000, help="accesses to replay (tokens x layers x top-k)")
    g.add_argument("--vram", type=float, default=0.2, help="VRAM capacity, fraction of all experts' bytes")
    g.add_argument("--ram", type=float, default=0.6, help="RAM capacity, fraction of all experts' bytes")
    g.add_argument("--profile", default="pcie4-nvme", help="device profile preset (pcie4-nvme, phone)")


def run(args, overrides) -> int:
    import importlib
    module = importlib.import_module(BENCHMARKS[args.name])
    if args.repeats is None:
        args.repeats = DEFAULT_REPEATS.get(args.name, 5)
    if args.chunk is None:
        args.chunk = DEFAULT_CHUNK.get(args.name, 2048)
    print(module.run(args, overrides))
    return 0
