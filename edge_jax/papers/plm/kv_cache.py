"""KV-cache size per token (PLM §7.1, eqs. 6-7) and decode speed of MLA against GQA/MHA.

Per token and sequence, all layers: GQA (6) ``n_layers x 2 x n_kv_heads x head_dim x bits/8``,
MLA (7) ``n_layers x (d_rope + d_c) x bits/8``. PLM-1.8B caches 576 (512 + 64) values per token per
layer against 4096 (2 x 16 x 128) for its MHA twin: 0.1406. :func:`cache_bytes` measures the same
from the per-token arrays of the cache :func:`edge_jax.infer.decode.init_cache` builds (real arrays,
or ``jax.eval_shape`` shapes when large; the per-slot positions and flags are bookkeeping, not
counted), so the formula is checked against what the decoder stores.

    edge-jax analyze kv-cache --config configs/plm.py:size=1p8b [--tokens N] [--bits 8]

:func:`write_attention_report` is the ``post`` hook of ``ablations/plm_attention.py``: cache bytes and
greedy decode tokens/s of each trained cell (MLA naive and absorbed, GQA, MHA) at several contexts.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from edge_jax.config import ConfigError
from edge_jax.grid.post import PostCannotRun, absent_inputs
from edge_jax.infer.decode import decode_tokens, init_cache, prefill
from edge_jax.infer.kv_state import value_arrays
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.utils.atomic import save_figure_atomic, write_text_atomic
from edge_jax.utils.timing import time_interleaved

AUTO_LIMIT = 256 * 2**20  # cache_bytes allocates real arrays below this many bytes
CONTEXTS, DECODE_STEPS, ROUNDS = (128, 512, 2048), 32, 3
# PLM Table 13 (A10, 512-token prompt, 128 new tokens): decode tokens/s.
TABLE13 = {"PLM-Q8": 86.19, "Fox-Q8": 67.82, "PLM-Q4": 114.12, "Fox-Q4": 84.21}


def dtype_bits(dtype) -> int:
    return jnp.dtype(dtype).itemsize * 8


def formula_bytes(cfg: ModelConfig, bits: int) -> dict:
    """Eq. (7) for MLA, eq. (6) otherwise: cached elements and bytes per token (one sequence)."""
    if cfg.attention == "mla":
        per_layer, eq = cfg.d_rope + cfg.kv_lora_rank, "(7)"
        terms = f"d_c {cfg.kv_lora_rank} + d_rope {cfg.d_rope}"
    else:
        per_layer, eq = 2 * cfg.n_kv_heads * cfg.head_dim, "(6)"
        terms = f"2 x {cfg.n_kv_heads} x {cfg.head_dim}"
    return {"equation": eq, "terms": terms, "bits": bits, "elements_per_layer": per_layer,
            "elements": cfg.n_layers * per_layer, "bytes_per_layer": per_layer * bits / 8,
            "bytes": cfg.n_layers * per_layer * bits / 8}


def _cached_leaves(cache):
    """``[(layer, name, array)]`` of the per-token cache arrays (``pos`` / ``valid`` left out)."""
    return [(f"layers_{i}", name, a) for i, layer in enumerate(cache) for name, a in value_arrays(layer).items()]


def cache_bytes(model, batch: int, max_len: int, materialize: bool | None = None) -> dict:
    """Cache size per token per sequence, measured from :func:`init_cache`'s arrays.

    ``materialize``: True sums the real arrays' ``nbytes``; False uses ``jax.eval_shape`` shapes
    (nothing allocated; for paper sizes); None picks real arrays when they total < 256 MiB."""
    abstract = jax.eval_shape(lambda: init_cache(model, batch, max_len))
    total = sum(math.prod(a.shape) * a.dtype.itemsize for _, _, a in _cached_leaves(abstract))
    if materialize is None:
        materialize = total < AUTO_LIMIT
    leaves = _cached_leaves(init_cache(model, batch, max_len) if materialize else abstract)
    if materialize:
        total = sum(int(a.nbytes) for _, _, a in leaves)
    per_layer = {}
    for layer, _, a in leaves:
        per_layer[layer] = per_layer.get(layer, 0) + math.prod(a.shape[2:])
    if len(set(per_layer.values())) != 1:
        raise ValueError(f"cached elements per token differ between layers: {per_layer}")
    return {"measured_from": "real arrays" if materialize else "abstract (jax.eval_shape)",
            "batch": batch, "tokens": max_len, "total_bytes": total, "layers": len(per_layer),
            "bytes_per_token": total / (batch * max_len),
            "elements_per_layer": next(iter(per_layer.values())),
            "arrays": {f"{layer}/{name}": (tuple(a.shape), str(a.dtype)) for layer, name, a in leaves
                       if layer == "layers_0"}}


def gqa_twin(cfg: ModelConfig) -> ModelConfig:
    """The MHA twin of an MLA config (one KV head of ``head_dim`` per query head, as in
    ``configs/plm.py:attention=mha``); d_ff is kept, which does not change the cache."""
    from edge_jax.papers.plm.variants import plm_variant
    if cfg.attention != "mla":
        raise ValueError(f"gqa_twin needs an MLA config, got attention={cfg.attention!r}")
    changes = plm_variant(dataclasses.asdict(cfg), "mha", cfg.ffn, match_params=False)
    return dataclasses.replace(cfg, **changes, mla_absorb=False)


def _size(n: float) -> str:
    unit, scale = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if n >= s), ("B", 1))
    return f"{n / scale:.1f} {unit}"


def _attention_desc(cfg: ModelConfig) -> str:
    if cfg.attention == "mla":
        return f"mla {cfg.n_heads}x({cfg.head_dim}+{cfg.d_rope})"
    return f"{'mha' if cfg.n_kv_heads == cfg.n_heads else 'gqa'} {cfg.n_kv_heads}x{cfg.head_dim}"


def kv_cache_report(config, tokens: int = 0, bits: int = 0, batch: int = 1, spec: str = "") -> str:
    """Eqs. (6)-(7) beside the measured cache of the config's model and (for MLA) its MHA twin."""
    from edge_jax.train.setup import resolve_config
    config, _ = resolve_config(config)
    cfg = ModelConfig.from_config(config.model)
    tokens = tokens or config.data.seq_len
    array_bits = dtype_bits(cfg.dtype)
    bits = bits or array_bits
    rows = [("model", cfg)] + ([("MHA twin", gqa_twin(cfg))] if cfg.attention == "mla" else [])
    lines = [f"KV cache per token, PLM §7.1 eqs. (6)-(7): {spec or 'config'}, {cfg.n_layers} layers, "
             f"{cfg.dtype} cache ({array_bits}-bit), formula at {bits} bits; measured on {batch} x {tokens} tokens",
             f"  {'':<9} {'attention':<16} {'eq.':<4} {'elements/token/layer':<30} {'formula B/token':>16} "
             f"{'measured B/token':>17}  measured from"]
    res = [(formula_bytes(c, bits), cache_bytes(DecoderLM(c), batch, tokens)) for _, c in rows]
    for (label, c), (f, m) in zip(rows, res):
        elems = f"{f['elements_per_layer']} = {f['terms']}"
        if m["elements_per_layer"] != f["elements_per_layer"]:
            elems += f" (arrays: {m['elements_per_layer']})"
        lines.append(f"  {label:<9} {_attention_desc(c):<16} {f['equation']:<4} {elems:<30} {f['bytes']:>16,.0f} "
                     f"{m['bytes_per_token']:>17,.0f}  {m['measured_from']}: {_size(m['total_bytes'])} for "
                     f"{batch} x {tokens} tokens ({_size(f['bytes'] * tokens)} per sequence by the formula)")
    if len(res) == 2:
        (f0, m0), (f1, m1) = res
        lines.append(f"  MLA / MHA twin: elements per token per layer {f0['elements_per_layer']} / "
                     f"{f1['elements_per_layer']} = {f0['elements_per_layer'] / f1['elements_per_layer']:.4f}; "
                     f"formula bytes {f0['bytes'] / f1['bytes']:.4f}; measured bytes "
                     f"{m0['bytes_per_token'] / m1['bytes_per_token']:.4f}")
    if bits != array_bits:
        lines.append(f"  the formula uses {bits}-bit values (--bits); the arrays are {cfg.dtype}, "
                     f"so measured = formula x {array_bits}/{bits}")
    return "\n".join(lines)


@jax.jit
def _copy(tree):
    return jax.tree_util.tree_map(jnp.copy, tree)


def _one_per_cell(records: list[dict], order) -> list[dict]:
    """Seed 0 of each cell (else its lowest seed), cells in ``order`` then as they come."""
    best = {}
    for r in records:
        if r["cell"] not in best or r["seed"] < best[r["cell"]]["seed"]:
            best[r["cell"]] = r
    cells = [c for c in order if c in best] + [c for c in best if c not in order]
    return [best[c] for c in cells]


def _rows_for(record: dict, notes: list[str]) -> list[dict]:
    from edge_jax.train.evaluate import restore_latest
    wd, cell = record.get("workdir"), record["cell"]
    if not wd or not os.path.isdir(wd):
        notes.append(f"{cell}: workdir {wd} is missing; skipped")
        return []
    try:
        run, state, step = restore_latest(wd)
    except (FileNotFoundError, ConfigError) as e:
        notes.append(f"{cell}: {e}; skipped")
        return []
    cfg, params = run.model.cfg, nn.unbox(state.params)
    modes = (("naive", False), ("absorbed", True)) if cfg.attention == "mla" else (("", None),)
    rows = []
    for mode, absorb in modes:
        c = cfg if absorb is None else dataclasses.replace(cfg, mla_absorb=absorb)
        rows.append({"cell": cell, "seed": record["seed"], "step": int(step), "mode": mode,
                     "label": f"{cell} ({mode})" if mode else cell, "attention": _attention_desc(c),
                     "model": DecoderLM(c), "params": params, "cfg": c})
    return rows


def attention_report(records: list[dict], out, contexts=CONTEXTS, steps: int = DECODE_STEPS,
                     rounds: int = ROUNDS, order=()) -> list[Path]:
    """Write ``out/decode.md`` and ``out/decode.png`` (see :func:`write_attention_report`)."""
    if min(contexts) <= steps:
        raise ValueError(f"contexts {contexts} must exceed the {steps} timed decode steps")
    out, notes, rows = Path(out), [], []
    for record in _one_per_cell(records, list(order)):
        rows += _rows_for(record, notes)
    rng = np.random.default_rng(0)
    for r in rows:
        r["cache"] = cache_bytes(r["model"], 1, contexts[0] + steps, materialize=True)
        r["tok_s"] = {}
    for ctx in contexts:
        fns = {}
        for i, r in enumerate(rows):
            prompt_BT = rng.integers(0, r["cfg"].vocab_size, (1, ctx - steps), dtype=np.int32)
            cache = init_cache(r["model"], 1, ctx + steps)
            logits_BV, cache = prefill(r["model"], r["params"], cache, jnp.asarray(prompt_BT))
            first_B1 = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)[:, None]

            def run_round(r=r, cache=cache, first_B1=first_B1):
                _, c = decode_tokens(r["model"], r["params"], _copy(cache), first_B1, steps)
                return jax.tree_util.tree_leaves(c)

            fns[i] = run_round
        for i, sec in time_interleaved(fns, rounds, steps).items():
            rows[i]["tok_s"][ctx] = 1.0 / sec
    paths = [out / "decode.md", out / "decode.png"]
    write_text_atomic(paths[0], _markdown(rows, notes, contexts, steps, rounds))
    _plot(rows, contexts, paths[1])
    return paths


def write_attention_report(grid, records, out) -> list[Path]:
    """Grid post hook: per cell (one seed), KV-cache bytes per token from the real cache arrays and
    greedy decode tokens/s (batch 1) at contexts 128 / 512 / 2048, MLA both naive and absorbed. A cell whose
    workdir is not here leaves decode.md and decode.png as they are (or, with none here, unwritten)."""
    order = list(getattr(grid, "cells", ()))
    chosen = _one_per_cell(records, order)
    missing, outputs = absent_inputs(chosen), [Path(out) / "decode.md", Path(out) / "decode.png"]
    if missing and (len(missing) == len(chosen) or any(p.exists() for p in outputs)):
        raise PostCannotRun(f"{len(missing)} of the {len(chosen)} cells' workdirs are not here ({missing[0]}"
                            f"{', ...' if len(missing) > 1 else ''}); run the grid to remeasure", outputs)
    return attention_report(records, out, order=order)


def _markdown(rows, notes, contexts, steps, rounds) -> str:
    dev = jax.devices()[0]
    lines = ["# KV cache and decode speed: MLA vs GQA / MHA", "",
             f"Per cell: one trained seed (seed 0 when present), its latest checkpoint. Cache bytes are summed "
             f"from the per-token arrays `init_cache` allocates (slot positions and flags excluded), per token of "
             "one sequence, all "
             f"layers. Decode: batch 1, a random prompt of context - {steps} tokens prefilled into a cache of "
             f"context + {steps} slots, then {steps} greedy steps timed (`decode_tokens`, each token brought to "
             f"the host); median of {rounds} rounds interleaved between rows; {dev.platform} ({dev.device_kind}). "
             "MLA is timed naive (latents decompressed every step) and absorbed (attention in the latent space), "
             "same parameters. Ratios are against the first row.", ""]
    if rows:
        head = "| cell | seed (step) | attention | cache elements / token / layer | cache bytes / token (all layers) | "
        lines += [head + " | ".join(f"tok/s @{c} (ratio)" for c in contexts) + " |",
                  "|---|---|---|---:|---:|" + "---:|" * len(contexts)]
        base = rows[0]["tok_s"]
        for r in rows:
            speeds = " | ".join(f"{r['tok_s'][c]:.1f} ({r['tok_s'][c] / base[c]:.2f})" for c in contexts)
            lines.append(f"| {r['label']} | {r['seed']} ({r['step']}) | {r['attention']} | "
                         f"{r['cache']['elements_per_layer']} | {r['cache']['bytes_per_token']:,.0f} | {speeds} |")
    else:
        lines.append("No cell could be measured.")
    t = TABLE13
    lines += ["", f"PLM Table 13 (A10, 512-token prompt, 128 new tokens), decode tok/s: PLM-Q8 {t['PLM-Q8']} vs "
              f"Fox-Q8 {t['Fox-Q8']} (ratio {t['PLM-Q8'] / t['Fox-Q8']:.2f}), PLM-Q4 {t['PLM-Q4']} vs Fox-Q4 "
              f"{t['Fox-Q4']} (ratio {t['PLM-Q4'] / t['Fox-Q4']:.2f})."]
    lines += ([""] + [f"- {n}" for n in notes]) if notes else []
    return "\n".join(lines) + "\n"


def _plot(rows, contexts, path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    fig = Figure(figsize=(7, 4.5), dpi=120, layout="constrained")
    ax = fig.add_subplot()
    for r in rows:
        ax.plot(contexts, [r["tok_s"][c] for c in contexts], marker="o", markersize=3,
                label=f"{r['label']}: {r['attention']}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(contexts), [str(c) for c in contexts])
    ax.set_xlabel("context (tokens in the cache)")
    ax.set_ylabel("greedy decode tokens/s (batch 1)")
    ax.set_title("Decode speed vs context: MLA (naive, absorbed) vs GQA / MHA", fontsize="medium")
    if rows:
        ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    save_figure_atomic(fig, path)
