"""``edge-jax bench mla-decode``: decode step speed of MLA (naive, absorbed) and its MHA twin vs context.

PLM §7.1 / App. D: MLA caches (d_c + d_rope) values per token per layer instead of GQA's
2 x n_kv_heads x head_dim, at the price of more compute per step. Three decoders of one shape are
timed interleaved (:func:`edge_jax.utils.timing.samples_interleaved`) at several contexts:

* ``naive``: MLA decompressing every cached latent into per-head keys and values each step
  (``mla_absorb=False``; O(S d_c H K) per step);
* ``absorbed``: the same parameters with W_UK folded into the query and W_UV into the output, so
  attention runs over the latents directly (``mla_absorb=True``; O(S H (d_c + d_rope)) per step);
* ``gqa``: the twin with ``--kv-heads`` KV heads of ``head_dim`` (default one per query head, the MHA
  of PLM's comparison) and the same d_model / d_ff, so its attention is the only difference.

Default shape: PLM-1.8B's attention (d_model 2048, 16 heads x (128 + 64 rope), d_c 512) with 2
layers, d_ff 2048 and vocabulary 4096. Parameters are random (normal, std 0.02; norm scales 1).

Each variant's speed is its median over the rounds; since a round times the three back to back, the
ratios are also taken per round, and the report gives their median and spread (25th-75th percentile).
``--json`` writes the same numbers as ``result`` (:func:`to_json`).

The caches are not prefilled: their arrays are filled with random normal values and their first
``context`` slots marked filled. A decode step's cost does not depend on the cached values (the same
arithmetic for any values), so this times the same work as after an 8K-token prefill without paying
for it. Each round continues the previous one (no copies): the cache has ``context + steps x
(repeats + 1)`` slots, a few more than the nominal context. The naive and MHA steps attend over every
slot under a mask; the absorbed step reads only the filled ones (flash-decoding,
:mod:`edge_jax.layers.kernels.mla_decode`; ``--kernels pallas``: the Pallas kernel).

The ``mla_decode`` rows of ``edge-jax bench kernels`` (:func:`kernel_cases`) time that kernel alone
against the XLA flash-decoding at PLM-1.8B's attention: 16 heads, d_c 512, d_rope 64 (the scale
1/sqrt(128 + 64)), batch 1, bfloat16, 2K, 8K and 32K filled slots of a 32K-slot cache. ``flops``:
2 H L (2 d_c + d_rope) for L filled slots (scores against latent and RoPE key, then the weighted sum
of latents); ``bytes``: the filled latent and RoPE-key slots read once.
"""
from __future__ import annotations

import dataclasses
import functools
import statistics

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.bench.kernels import KERNEL_CASES, KernelCase
from edge_jax.config import ConfigError
from edge_jax.infer.decode import decode_tokens, init_cache
from edge_jax.layers.kernels.mla_decode import mla_decode, mla_decode_xla
from edge_jax.papers.plm.cli import DEFAULT_CONTEXTS, DEFAULT_STEPS
from edge_jax.papers.plm.kv_cache import cache_bytes, gqa_twin
from edge_jax.utils.atomic import write_json_atomic
from edge_jax.utils.timing import samples_interleaved

DEFAULT_SHAPE = dict(vocab_size=4096, d_model=2048, n_layers=2, n_heads=16, head_dim=128, d_ff=2048,
                     d_rope=64, kv_lora_rank=512)
DEFAULT_REPEATS = 5  # --repeats default
GOAL = 1.5  # absorbed >= 1.5 x naive at the largest context
VARIANTS = ("naive", "absorbed", "gqa")
_FLAGS = {"d_model": "d_model", "layers": "n_layers", "heads": "n_heads", "head_dim": "head_dim",
          "d_ff": "d_ff", "vocab": "vocab_size", "d_rope": "d_rope", "kv_lora_rank": "kv_lora_rank"}


def bench_configs(args):
    """``(mla ModelConfig, gqa twin ModelConfig, contexts, steps)`` from the flags."""
    from edge_jax.models.decoder import ModelConfig
    if args.preset:
        raise ConfigError("--preset applies to meki-decode; mla-decode takes size flags (--d-model, --heads, ...)")
    shape = dict(DEFAULT_SHAPE)
    shape.update({field: getattr(args, flag) for flag, field in _FLAGS.items()
                  if getattr(args, flag, None) is not None})
    if args.dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"--dtype {args.dtype!r} is not one of float32, bfloat16, float16")
    kv_heads = args.kv_heads or shape["n_heads"]
    if shape["n_heads"] % kv_heads:
        raise ConfigError(f"--heads {shape['n_heads']} is not a multiple of --kv-heads {kv_heads}")
    if shape["d_rope"] % 2 or min(shape.values()) <= 0:
        raise ConfigError(f"size flags must be positive and --d-rope even, got {shape}")
    try:
        contexts = tuple(int(c) for c in str(args.contexts).split(","))
    except ValueError:
        raise ConfigError(f"--contexts needs comma-separated integers like 1024,4096, got {args.contexts!r}") from None
    steps = args.decode_steps
    if min(contexts) <= 0 or steps <= 0 or args.batch <= 0 or args.repeats <= 0:
        raise ConfigError("--contexts, --decode-steps, --batch and --repeats must be positive")
    mla = ModelConfig(**shape, n_kv_heads=shape["n_heads"], attention="mla", ffn="relu2", qk_norm=False,
                      rope_theta=10_000.0, dtype=args.dtype, param_dtype=args.dtype,
                      kernels=getattr(args, "kernels", "xla"))
    gqa = dataclasses.replace(gqa_twin(mla), n_kv_heads=kv_heads)
    return mla, gqa, contexts, steps


def _random_like(shapes, seed: int, std: float = 1.0, special=None):
    """Arrays of the given shapes/dtypes with normal values drawn on the host (numpy: no per-shape
    compile); ``special(path_keys, shape_dtype)`` may return a replacement value for a leaf."""
    rng = np.random.default_rng(seed)
    leaves, tree = jax.tree_util.tree_flatten_with_path(shapes)
    out = []
    for path, s in leaves:
        keys = [getattr(p, "key", str(p)) for p in path]
        value = special(keys, s) if special else None
        if value is None:
            value = (rng.standard_normal(s.shape, np.float32) * std)
        out.append(jnp.asarray(value, s.dtype))
    return jax.tree_util.tree_unflatten(tree, out)


def filled_cache(model, batch: int, context: int, slots: int, seed: int = 0):
    """A ``slots``-long cache whose per-token arrays hold random normal values, its first ``context``
    slots marked filled."""
    shapes = jax.eval_shape(lambda: init_cache(model, batch, slots))
    return _random_like(shapes, seed, special=lambda keys, s: np.broadcast_to(np.arange(slots) < context, s.shape)
                        if keys[-1] == "valid" else None)


def _init(model, seed: int):
    """Random parameters: normal(0.02) weights, unit norm scales (shapes from ``jax.eval_shape``)."""
    shapes = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))["params"]
    return _random_like(shapes, seed, 0.02, lambda keys, s: np.ones(s.shape, np.float32) if keys[-1] == "scale"
                        else None)


def measure(mla, gqa, contexts=DEFAULT_CONTEXTS, steps: int = DEFAULT_STEPS, repeats: int = DEFAULT_REPEATS,
            batch: int = 1, seed: int = 0) -> dict:
    """Per context: tokens/s of each variant (median over interleaved rounds), the per-round ratios'
    median and 25th-75th percentiles, and cache MB/sequence."""
    from edge_jax.models.decoder import DecoderLM
    models = {"naive": DecoderLM(dataclasses.replace(mla, mla_absorb=False)),
              "absorbed": DecoderLM(dataclasses.replace(mla, mla_absorb=True)), "gqa": DecoderLM(gqa)}
    mla_params = _init(models["naive"], seed)
    params = {"naive": mla_params, "absorbed": mla_params, "gqa": _init(models["gqa"], seed)}
    token_B1 = jnp.zeros((batch, 1), jnp.int32)
    out = {}
    for ctx in contexts:
        slots = ctx + steps * (repeats + 1)
        mla_cache = filled_cache(models["naive"], batch, ctx, slots, seed)
        state = {"naive": mla_cache, "absorbed": jax.tree_util.tree_map(jnp.copy, mla_cache),
                 "gqa": filled_cache(models["gqa"], batch, ctx, slots, seed)}
        mb = {k: cache_bytes(models[k], batch, slots, materialize=False)["bytes_per_token"] * ctx / 2**20
              for k in ("naive", "gqa")}

        def round_fn(name):
            def run():
                _, state[name] = decode_tokens(models[name], params[name], state[name], token_B1, steps)
                return jax.tree_util.tree_leaves(state[name])
            return run

        samples = samples_interleaved({name: round_fn(name) for name in VARIANTS}, repeats, steps)
        secs = {name: statistics.median(s) for name, s in samples.items()}
        tok_s = {name: batch / s for name, s in secs.items()}
        rounds = {other: np.asarray(samples[other]) / np.asarray(samples["absorbed"]) for other in ("naive", "gqa")}
        out[ctx] = {"tokens_per_s": tok_s, "ms_per_step": {n: s * 1e3 for n, s in secs.items()},
                    "cache_mb": {"mla": mb["naive"], "gqa": mb["gqa"]}, "slots": slots,
                    "absorbed_vs_naive": tok_s["absorbed"] / tok_s["naive"],
                    "absorbed_vs_gqa": tok_s["absorbed"] / tok_s["gqa"],
                    "round_ratio": {f"absorbed_vs_{k}": float(np.median(v)) for k, v in rounds.items()},
                    "round_ratio_p25_p75": {f"absorbed_vs_{k}": [float(q) for q in np.percentile(v, [25, 75])]
                                            for k, v in rounds.items()}}
        state.clear()  # free this context's caches before the next one's
    return out


def format_report(mla, gqa, r: dict, steps: int, repeats: int, batch: int) -> str:
    dev = jax.devices()[0]
    mla_el, gqa_el = mla.d_rope + mla.kv_lora_rank, 2 * gqa.n_kv_heads * gqa.head_dim
    twin = "MHA" if gqa.n_kv_heads == gqa.n_heads else "GQA"
    lines = [f"mla-decode benchmark: d_model {mla.d_model}, {mla.n_layers} layers, {mla.n_heads} heads x "
             f"({mla.head_dim} + {mla.d_rope} rope), d_c {mla.kv_lora_rank}, d_ff {mla.d_ff} relu2, vocab "
             f"{mla.vocab_size}, {mla.dtype}; {twin} twin: {gqa.n_kv_heads} KV heads x {gqa.head_dim}; batch "
             f"{batch}; {dev.platform} ({dev.device_kind}); {steps} decode steps per round, median of {repeats} "
             f"interleaved rounds; model.kernels {mla.kernels}",
             "  caches filled with random values up to the context (not prefilled: a step's cost does not depend "
             "on the cached values)",
             f"  cache per token per layer: MLA {mla_el} values (d_c {mla.kv_lora_rank} + d_rope {mla.d_rope}) vs "
             f"{twin} {gqa_el} (2 x {gqa.n_kv_heads} x {gqa.head_dim}) = {mla_el / gqa_el:.4f} (PLM eqs. 6-7)",
             f"  {'context':>7} {'MLA MB/seq':>10} {f'{twin} MB/seq':>10} {'naive tok/s':>12} {'absorbed tok/s':>15} "
             f"{f'{twin} tok/s':>10} {'absorbed/naive':>15} {f'absorbed/{twin}':>13}"]
    for ctx, x in r.items():
        t = x["tokens_per_s"]
        lines.append(f"  {ctx:>7} {x['cache_mb']['mla']:>10.2f} {x['cache_mb']['gqa']:>10.2f} {t['naive']:>12.2f} "
                     f"{t['absorbed']:>15.2f} {t['gqa']:>10.2f} {x['absorbed_vs_naive']:>15.3f} "
                     f"{x['absorbed_vs_gqa']:>13.3f}")
    last = max(r)
    ratio = r[last]["absorbed_vs_naive"]
    at = "8K" if last == 8192 else f"{last} (largest context given; the goal is stated at 8K)"
    lines.append(f"  absorbed >= {GOAL}x naive at {at}: {'met' if ratio >= GOAL else 'NOT met'} ({ratio:.2f}x)")
    lines.append(f"  per-round ratios, median [p25-p75] over {repeats} rounds: " + "; ".join(
        f"{ctx}: absorbed/naive {_spread(x, 'naive')}, absorbed/{twin} {_spread(x, 'gqa')}" for ctx, x in r.items()))
    lines.append(f"  ms/step at {last}: " + ", ".join(f"{n} {r[last]['ms_per_step'][n]:.2f}" for n in VARIANTS)
                 + f"; naive and {twin} attend over all {r[last]['slots']} cache slots, absorbed over the filled ones")
    return "\n".join(lines)


def _spread(x: dict, other: str) -> str:
    key = f"absorbed_vs_{other}"
    lo, hi = x["round_ratio_p25_p75"][key]
    return f"{x['round_ratio'][key]:.2f} [{lo:.2f}-{hi:.2f}]"


def to_json(mla, gqa, r: dict, steps: int, repeats: int, batch: int) -> dict:
    """What ``--json`` keeps as ``result``: the shape and settings, then every measured number by context."""
    shape = {k: getattr(mla, k) for k in ("d_model", "n_layers", "n_heads", "head_dim", "d_rope", "kv_lora_rank",
                                         "d_ff", "vocab_size", "dtype", "kernels")}
    return {"shape": {**shape, "twin_kv_heads": gqa.n_kv_heads}, "batch": batch, "decode_steps": steps,
            "repeats": repeats, "goal_absorbed_vs_naive": GOAL, "contexts": {str(ctx): x for ctx, x in r.items()}}


def run(args, overrides) -> str:
    if overrides:
        raise ConfigError("--config.* overrides do not apply to mla-decode; use its size flags (--d-model, ...)")
    mla, gqa, contexts, steps = bench_configs(args)
    r = measure(mla, gqa, contexts, steps, args.repeats, args.batch)
    if getattr(args, "json", None):
        write_json_atomic(args.json, to_json(mla, gqa, r, steps, args.repeats, args.batch))
    return format_report(mla, gqa, r, steps, args.repeats, args.batch)


# --- `edge-jax bench kernels`: the mla_decode kernel alone (module docstring)

KERNEL_CONTEXTS, KERNEL_SLOTS = (2048, 8192, 32768), 32768


def kernel_case(label: str, lengths, slots: int, heads: int, head_dim: int, d_rope: int, kv_lora_rank: int,
                dtype: str, seed: int = 0, **blocks) -> KernelCase:
    """Random normal queries and cache (``slots`` per row), ``lengths`` filled slots per row."""
    dt = jnp.dtype(dtype)
    B = len(lengths)
    ks = jax.random.split(jax.random.key(seed), 4)
    shapes = [(B, heads, kv_lora_rank), (B, heads, d_rope), (B, slots, kv_lora_rank), (B, slots, d_rope)]
    args = tuple(jax.random.normal(k, s, jnp.float32).astype(dt) for k, s in zip(ks, shapes))
    scale = float(1 / np.sqrt(head_dim + d_rope))
    filled = float(sum(lengths))
    return KernelCase(label, functools.partial(mla_decode, scale=scale, **blocks),
                      functools.partial(mla_decode_xla, scale=scale),
                      args + (jnp.asarray(lengths, jnp.int32),),
                      flops=2 * heads * filled * (2 * kv_lora_rank + d_rope),
                      bytes=filled * (kv_lora_rank + d_rope) * dt.itemsize, dtype=dtype)


def kernel_cases(small: bool) -> list[KernelCase]:
    if small:  # the CPU interpreter: 4 heads, d_c 128, two rows of different lengths, 16 grid steps
        return [kernel_case(f"H 4, d_c 128, d_rope 16, lengths (96, 41) of 128 slots, {dtype}", (96, 41), 128, 4, 32,
                            16, 128, dtype, block_s=32, splits=2) for dtype in ("float32", "bfloat16")]
    from edge_jax.models.presets import MODEL_SIZES
    a = MODEL_SIZES["plm_1p8b"]
    return [kernel_case(f"PLM-1.8B MLA, {ctx} of {KERNEL_SLOTS} slots, batch 1", (ctx,), KERNEL_SLOTS, a["n_heads"],
                        a["head_dim"], a["d_rope"], a["kv_lora_rank"], "bfloat16") for ctx in KERNEL_CONTEXTS]


KERNEL_CASES.register("mla_decode", kernel_cases)
