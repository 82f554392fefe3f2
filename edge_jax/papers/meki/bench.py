"""``edge-jax bench meki-decode``: KV-cache decode speed of dense, folded MeKi and training-form MeKi.

MeKi Table 1 (speed column): after folding, MeKi decodes at the dense baseline's speed (19.9 vs
20.1 tok/s at 0.6B). Three models of the same size decode greedily from the same prompt, timed
interleaved in one run (:func:`edge_jax.utils.timing.time_interleaved`):

* ``baseline``: the dense model, whose weights are the MeKi model's base weights;
* ``folded``: MeKi after its fold (:func:`edge_jax.models.inference.inference_form`), its tables
  [V, L, d_mem] in host memory (:func:`edge_jax.papers.meki.host_tables.host_tables`); each step
  gathers the next token's rows on the host (numpy) and the jitted step copies them to the device,
  inside the timed step. The report also gives what one ``jax.device_put`` of those rows costs (Python
  overhead a decode loop avoids);
* ``train_form``: MeKi as trained (memory + SwiGLU projection evaluated every step, on the device).

A round decodes ``new_tokens`` tokens from a copy of the prefilled cache (prefill is not timed); every
step brings its token to the host, as a streaming generator does. Parameters are random (init). The
report gives each variant's median over the rounds and, since a round times every variant back to back,
the spread (25th-75th percentile) of the per-round ratios to the baseline; ``--json`` writes the same
numbers (:func:`to_json`).
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.config import ConfigError
from edge_jax.infer.decode import decode_tokens, init_cache, prefill
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.models.inference import inference_form
from edge_jax.models.presets import MODEL_SIZES
from edge_jax.papers.meki.host_tables import host_tables
from edge_jax.papers.meki.params import MEKI_PAPER
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.timing import samples_interleaved

DEFAULT_SIZE = dict(d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, head_dim=64, d_ff=1536, vocab_size=32_000)
DEFAULT_D_MEM = 64
PAPER_BYTES = (28, 256, 2)  # MeKi §3.5: 28 layers x d_mem 256 x fp16 = 14 KB per token
VARIANTS = ("baseline", "folded", "train_form")
_FLAGS = {"d_model": "d_model", "layers": "n_layers", "heads": "n_heads", "kv_heads": "n_kv_heads",
          "head_dim": "head_dim", "d_ff": "d_ff", "vocab": "vocab_size"}


def bench_config(args) -> tuple[ModelConfig, int]:
    """The dense baseline config and d_mem from ``--preset`` and the size flags."""
    size = dict(DEFAULT_SIZE)
    if args.preset:
        if args.preset not in MODEL_SIZES:
            raise ConfigError(f"unknown --preset {args.preset!r}; valid: {', '.join(MODEL_SIZES)}")
        size.update(MODEL_SIZES[args.preset])
    size.update({field: getattr(args, flag) for flag, field in _FLAGS.items() if getattr(args, flag) is not None})
    d_mem = args.d_mem or MEKI_PAPER.get(args.preset, {}).get("d_mem", DEFAULT_D_MEM)  # Table 5
    if args.dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"--dtype {args.dtype!r} is not one of float32, bfloat16, float16")
    if size["n_heads"] % size["n_kv_heads"]:
        raise ConfigError(f"--heads {size['n_heads']} is not a multiple of --kv-heads {size['n_kv_heads']}")
    if min(args.batch, args.prompt, args.new_tokens, d_mem) <= 0:
        raise ConfigError("--batch, --prompt, --new-tokens and --d-mem must be positive")
    return ModelConfig(**size, dtype=args.dtype, param_dtype=args.dtype), d_mem


def build_variants(base: ModelConfig, d_mem: int, seed: int = 0) -> tuple[dict, dict]:
    """``{name: (model, params, host_fn)}`` sharing one set of base weights, plus host-table facts."""
    meki_cfg = dataclasses.replace(base, memory="meki", d_mem=d_mem)
    meki_model = DecoderLM(meki_cfg)
    tokens_BT = jnp.zeros((1, 8), jnp.int32)
    meki_params = nn.unbox(jax.jit(meki_model.init)(jax.random.key(seed), tokens_BT))["params"]
    dense_params = {k: ({n: p for n, p in v.items() if n not in ("meki", "meki_norm")} if k.startswith("layers_")
                        else v) for k, v in meki_params.items()}
    folded_params, folded_cfg = inference_form(meki_params, meki_cfg)
    host = host_tables(folded_params, folded_cfg)
    del folded_params
    table = host.table_VLM
    info = {"bytes_per_token": host.bytes_per_token, "table_shape": tuple(table.shape),
            "table_dtype": str(table.dtype), "table_bytes": int(np.prod(table.shape)) * table.dtype.itemsize,
            "memory_kind": getattr(getattr(table, "sharding", None), "memory_kind", None) or "numpy",
            "host": host}
    variants = {"baseline": (DecoderLM(base), dense_params, None),
                "folded": (DecoderLM(folded_cfg), host.params, host.host_fn),
                "train_form": (meki_model, meki_params, None)}
    return variants, info


def _param_count(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))


@jax.jit
def _copy(tree):
    return jax.tree_util.tree_map(jnp.copy, tree)


def _call_us(fn, arg, n: int = 200) -> float:
    jax.block_until_ready(fn(arg))
    t0 = time.perf_counter()
    for _ in range(n):
        jax.block_until_ready(fn(arg))
    return (time.perf_counter() - t0) / n * 1e6


def measure(base: ModelConfig, d_mem: int, batch: int = 1, prompt: int = 64, new_tokens: int = 128,
            repeats: int = 5, seed: int = 0) -> dict:
    """Decode tokens/s per variant (median over ``repeats`` interleaved rounds), the per-round ratios to
    the baseline (median and 25th-75th percentile) and host-table facts."""
    variants, info = build_variants(base, d_mem, seed)
    prompt_BT = np.random.default_rng(seed).integers(0, base.vocab_size, (batch, prompt), dtype=np.int32)
    fns, device_params = {}, {}
    for name, (model, params, host_fn) in variants.items():
        cache = init_cache(model, batch, prompt + new_tokens)
        host_inputs = None if host_fn is None else host_fn(prompt_BT)
        logits_BV, cache = prefill(model, params, cache, jnp.asarray(prompt_BT), host_inputs)
        first_B1 = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)[:, None]
        device_params[name] = _param_count(params)

        def run_round(model=model, params=params, cache=cache, first_B1=first_B1, host_fn=host_fn):
            _, out = decode_tokens(model, params, _copy(cache), first_B1, new_tokens, host_fn)
            return jax.tree_util.tree_leaves(out)

        fns[name] = run_round
    samples = samples_interleaved(fns, repeats, new_tokens)
    secs = {name: statistics.median(s) for name, s in samples.items()}
    per_round = {n: np.asarray(samples["baseline"]) / np.asarray(samples[n]) for n in VARIANTS}
    spread = {n: [float(q) for q in np.percentile(per_round[n], [25, 75])] for n in VARIANTS}
    host, token_B1 = info.pop("host"), prompt_BT[:, :1]
    info.update(rows_us=_call_us(host.rows, token_B1), device_put_us=_call_us(host.gather, token_B1))
    tokens_per_s = {name: batch / s for name, s in secs.items()}
    return {"tokens_per_s": tokens_per_s, "ms_per_step": {n: s * 1e3 for n, s in secs.items()},
            "ratio": {n: tokens_per_s[n] / tokens_per_s["baseline"] for n in VARIANTS},
            "round_ratio": {n: float(np.median(per_round[n])) for n in VARIANTS}, "round_ratio_p25_p75": spread,
            "device_params": device_params, **info}


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n:.0f} B"


def format_report(base: ModelConfig, d_mem: int, r: dict, batch: int, prompt: int, new_tokens: int,
                  repeats: int) -> str:
    dev = jax.devices()[0]
    lines = [f"meki-decode benchmark: d_model {base.d_model}, {base.n_layers} layers, {base.n_heads}/{base.n_kv_heads} "
             f"heads x {base.head_dim}, d_ff {base.d_ff}, vocab {base.vocab_size}, d_mem {d_mem}, {base.dtype}; "
             f"batch {batch}, prompt {prompt}, {new_tokens} new tokens; {dev.platform} ({dev.device_kind}); "
             f"{repeats} rounds, median",
             f"  {'variant':<28} {'tokens/s':>10} {'ms/step':>9} {'ratio':>7} {'device params':>14}"]
    labels = {"baseline": "baseline (dense)", "folded": "MeKi folded (host tables)", "train_form": "MeKi train-form"}
    for n in VARIANTS:
        lines.append(f"  {labels[n]:<28} {r['tokens_per_s'][n]:10.2f} {r['ms_per_step'][n]:9.3f} "
                     f"{r['ratio'][n]:7.3f} {r['device_params'][n] / 1e6:13.2f}M")
    folded = r["ratio"]["folded"]
    lines.append(f"  folded/baseline = {folded:.3f} (goal >= 0.98: {'met' if folded >= 0.98 else 'NOT met'}; "
                 f"paper 19.9/20.1 = {19.9 / 20.1:.3f})   train-form/baseline = {r['ratio']['train_form']:.3f}")
    q = r["round_ratio_p25_p75"]
    lines.append(f"  per-round ratio to the baseline, median [p25-p75] over {repeats} rounds: folded "
                 f"{r['round_ratio']['folded']:.3f} [{q['folded'][0]:.3f}-{q['folded'][1]:.3f}], train-form "
                 f"{r['round_ratio']['train_form']:.3f} [{q['train_form'][0]:.3f}-{q['train_form'][1]:.3f}]")
    V, L, M = r["table_shape"]
    L_p, M_p, b_p = PAPER_BYTES
    lines.append(f"  host table [V, L, d_mem] = {V} x {L} x {M} {r['table_dtype']} "
                 f"({r['table_bytes'] / 2**20:.1f} MiB, "
                 f"{r['memory_kind']}); moved per token: {L} x {M} x {r['bytes_per_token'] // (L * M)} B = "
                 f"{_kb(r['bytes_per_token'])} (fp16: {_kb(L * M * 2)}); paper: {L_p} x {M_p} x {b_p} B = "
                 f"{_kb(L_p * M_p * b_p)}")
    lines.append(f"  host gather per step: {r['rows_us']:.1f} us (numpy; timed above); with a separate "
                 f"jax.device_put: {r['device_put_us']:.1f} us "
                 f"({r['device_put_us'] / 1e3 / r['ms_per_step']['folded']:.1%}"
                 " of the folded step)")
    return "\n".join(lines)


def to_json(base: ModelConfig, d_mem: int, r: dict, batch: int, prompt: int, new_tokens: int, repeats: int) -> dict:
    """What ``--json`` keeps as ``result``: the shape and settings, then every measured number."""
    shape = {k: getattr(base, k) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                                          "vocab_size", "dtype")}
    return {"shape": {**shape, "d_mem": d_mem}, "batch": batch, "prompt": prompt, "new_tokens": new_tokens,
            "repeats": repeats, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}}


def run(args, overrides) -> str:
    if overrides:
        raise ConfigError("--config.* overrides do not apply to meki-decode; use its size flags (--d-model, ...)")
    base, d_mem = bench_config(args)
    r = measure(base, d_mem, args.batch, args.prompt, args.new_tokens, args.repeats)
    report = format_report(base, d_mem, r, args.batch, args.prompt, args.new_tokens, args.repeats)
    if getattr(args, "json", None):
        write_json_atomic(args.json, to_json(base, d_mem, r, args.batch, args.prompt, args.new_tokens, args.repeats))
    return report
