"""``edge-jax bench long-context``: time to first token and peak memory vs input length (EdgeInfinite Fig. 3).

EdgeInfinite §4.4: its prefill runs the input in chunks of at most a segment (sink tokens kept, each
segment compressed into a fixed-size memory, the rest kept as KV cache), so its cost grows linearly
and its memory not at all with the input, while the base model's full-attention prefill keeps every
token's KV (memory linear, attention quadratic). Both are run in one process on one random model:

* ``edgeinfinite``: :class:`edge_jax.papers.edgeinfinite.inference.EdgeInfiniteSession` (Algorithm 1: the sink
  chunk, one compression step per segment, then the remaining tokens padded to window + segment);
* ``fullkv``: :class:`edge_jax.infer.kv_baselines.FullKVSession`, the same model and parameters
  without the memory: a chunked full-attention prefill (``--chunk`` tokens per step, each chunk
  attending over all earlier tokens), the base model's own long-input path.

At each length both methods get the same random token ids. TTFT is the wall time of ``prefill()``
until ``jax.block_until_ready`` on its logits [B, V] (host to device copy of the ids included). A
warm-up prefill at the same length runs first, so compiling is excluded, and it carries a
:class:`edge_jax.infer.kv_state.PeakProbe` (it compiles each chunk step with the session's own
arguments, so the session then reuses that executable): the peak is
XLA's accounting (argument + output + temporary bytes, from ``compiled.memory_analysis()``) of the
largest chunk step of that prefill, parameters and the cache it reads included. The timed prefills
run without the probe; the median of ``--repeats`` (default 1: one prefill at 32K-64K is already
many chunk steps) is reported. (Not :func:`edge_jax.utils.timing.time_interleaved`: its warm-up
could not carry the probe.)

Where the device reports memory (``memory_stats()``, e.g. GPU), its ``peak_bytes_in_use`` is read
after each point as an extra column. It is the process-wide running peak (it cannot be reset), so
the methods then run one after the other, EdgeInfinite at every length first: its column is its own,
FullKV's is the maximum of its own and EdgeInfinite's. Without it (CPU) the two methods are
interleaved at each length (warm-ups, then alternating timed prefills).

A length below sink + window + segment is not compressed at all: EdgeInfinite then runs one chunk
of sink + window + segment slots with plain attention (Algorithm 1's short input); such rows are
marked ``*``. FullKV above ``--max-fullkv-length`` is not run and reported as ``skipped``.

Goals checked at the end: EdgeInfinite's peak at 64K <= 1.15 x its peak at 8K (memory constant in
the input length), and EdgeInfinite's TTFT at 32K <= 0.5 x FullKV's.
"""
from __future__ import annotations

import dataclasses
import functools
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from edge_jax.bench.kernels import KERNEL_CASES, KernelCase
from edge_jax.config import ConfigError
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.infer.kv_state import PeakProbe, cache_bytes
from edge_jax.layers.kernels.segment_attention import segment_attention, segment_attention_reference
from edge_jax.models.decoder import DecoderLM, ModelConfig
from edge_jax.papers.edgeinfinite import inference  # noqa: F401  (registers the edgeinfinite method)
from edge_jax.papers.edgeinfinite.cli import (
    DEFAULT_CHUNK,
    DEFAULT_REPEATS,
    DEFAULT_SEGMENT,
    DEFAULT_SINK,
    DEFAULT_WINDOW,
)
from edge_jax.utils.args import output_file
from edge_jax.utils.atomic import save_figure_atomic, write_json_atomic

DEFAULT_SHAPE = dict(vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=256)
INFINI_HIDDEN = 32  # width of the memory-gating MLP (its cost is negligible either way)
METHODS = ("edgeinfinite", "fullkv")  # the two of Fig. 3, KV_METHODS names
PEAK_GOAL = (65536, 8192, 1.15)  # EdgeInfinite peak at 64K <= 1.15 x its peak at 8K
TTFT_GOAL = (32768, 0.5)  # EdgeInfinite TTFT at 32K <= 0.5 x FullKV's
MIB = 2 ** 20
_FLAGS = {"d_model": "d_model", "layers": "n_layers", "heads": "n_heads", "kv_heads": "n_kv_heads",
          "head_dim": "head_dim", "d_ff": "d_ff", "vocab": "vocab_size"}


# -- configuration ------------------------------------------------------------------------------
def parse_lengths(text) -> tuple[int, ...]:
    try:
        lengths = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"--lengths needs comma-separated integers like 2048,4096, got {text!r}") from None
    if min(lengths) <= 0 or len(set(lengths)) != len(lengths):
        raise ConfigError(f"--lengths must be positive and distinct, got {text!r}")
    return tuple(sorted(lengths))


def model_config(shape: dict | None = None, sink: int = DEFAULT_SINK, window: int = DEFAULT_WINDOW,
                 segment: int = DEFAULT_SEGMENT, dtype: str = "float32", kernels: str = "xla") -> ModelConfig:
    """A GQA decoder with EdgeInfinite's memory gate (``kernels``: ``model.kernels``); raises a
    one-line ConfigError for bad sizes."""
    shape = {**DEFAULT_SHAPE, **(shape or {})}
    if min(shape.values()) <= 0:
        raise ConfigError(f"model size flags must be positive, got {shape}")
    if shape["n_heads"] % shape["n_kv_heads"]:
        raise ConfigError(f"--heads {shape['n_heads']} is not a multiple of --kv-heads {shape['n_kv_heads']}")
    if shape["head_dim"] % 2:
        raise ConfigError(f"--head-dim {shape['head_dim']} must be even (RoPE rotates pairs)")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"--dtype {dtype!r} is not one of float32, bfloat16, float16")
    if segment <= 0 or sink < 0 or window < 0:
        raise ConfigError(f"--segment must be positive and --sink, --window non-negative, got sink {sink}, "
                          f"window {window}, segment {segment}")
    if window > segment:
        raise ConfigError(f"--window {window} is longer than --segment {segment}; use --window <= --segment "
                          "(the window tokens are what is left of the last segment)")
    return ModelConfig(**shape, dtype=dtype, param_dtype=dtype, infini_hidden=INFINI_HIDDEN, infini_sink=sink,
                       infini_window=window, infini_segment=segment, kernels=kernels)


def min_compressed_length(cfg: ModelConfig) -> int:
    """The shortest input EdgeInfinite compresses (shorter ones run as one plain-attention chunk)."""
    return cfg.infini_sink + max(cfg.infini_window, 1) + cfg.infini_segment


def bench_config(args) -> tuple[ModelConfig, tuple[int, ...]]:
    if args.preset:
        raise ConfigError("--preset applies to meki-decode; long-context takes size flags (--d-model, --layers, ...)")
    shape = {field: getattr(args, flag) for flag, field in _FLAGS.items() if getattr(args, flag, None) is not None}
    cfg = model_config(shape, args.sink, args.window, args.segment, args.dtype, args.kernels)
    lengths = parse_lengths(args.lengths)
    if args.chunk <= 0 or args.batch <= 0 or args.repeats <= 0:
        raise ConfigError("--chunk, --batch and --repeats must be positive")
    return cfg, lengths


# -- measurement --------------------------------------------------------------------------------
def init_params(model, seed: int = 0):
    """Random parameters drawn on the host from the shapes (no compile): normal(0.02), norm scales 1."""
    shapes = nn.unbox(jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))["params"]
    rng = np.random.default_rng(seed)
    leaves, tree = jax.tree_util.tree_flatten_with_path(shapes)
    out = [jnp.asarray(np.ones(s.shape, np.float32) if getattr(path[-1], "key", "") == "scale"
                       else rng.standard_normal(s.shape, np.float32) * 0.02, s.dtype) for path, s in leaves]
    return jax.tree_util.tree_unflatten(tree, out)


def device_peak_bytes() -> int | None:
    """The device's process-wide running peak (None where the device keeps no statistics, e.g. CPU)."""
    stats = jax.devices()[0].memory_stats()
    return None if not stats or "peak_bytes_in_use" not in stats else int(stats["peak_bytes_in_use"])


def _prefill_seconds(session, tokens) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(session.prefill(tokens))
    return time.perf_counter() - t0


def measure(cfg: ModelConfig, lengths, chunk: int = DEFAULT_CHUNK, repeats: int = DEFAULT_REPEATS,
            max_fullkv: int | None = None, batch: int = 1, seed: int = 0, order: str = "auto") -> dict:
    """Per length: ``{"compressed": bool, "edgeinfinite": point, "fullkv": point or None (skipped)}``
    where a point is ``{"ttft_s", "ttft_samples", "peak_bytes", "cache_bytes", "device_peak_bytes"}``.

    ``order``: ``interleaved`` (both methods at each length, alternating timed prefills),
    ``by-method`` (EdgeInfinite at every length, then FullKV) or ``auto`` (by-method where the device
    reports a running peak, else interleaved)."""
    lengths = tuple(sorted(int(n) for n in lengths))
    if not lengths or min(lengths) <= 0:
        raise ConfigError(f"lengths must be positive, got {lengths}")
    model_config({f: getattr(cfg, f) for f in DEFAULT_SHAPE}, cfg.infini_sink, cfg.infini_window,
                 cfg.infini_segment, cfg.dtype)  # the same one-line checks as the flags
    if chunk <= 0 or repeats <= 0 or batch <= 0:
        raise ConfigError(f"chunk, repeats and batch must be positive, got {chunk}, {repeats}, {batch}")
    if order == "auto":
        order = "interleaved" if device_peak_bytes() is None else "by-method"
    if order not in ("interleaved", "by-method"):
        raise ConfigError(f"order must be auto, interleaved or by-method, got {order!r}")
    model = DecoderLM(cfg)
    params = init_params(model, seed)
    rng = np.random.default_rng(seed)
    tokens = {n: rng.integers(0, cfg.vocab_size, (batch, n), dtype=np.int32) for n in lengths}
    settings = ml_collections.ConfigDict({"longctx": {"prefill_chunk": chunk, "answer_tokens": 0}})
    make = {m: (lambda m=m: KV_METHODS.get(m).from_config(model, params, settings, 0)) for m in METHODS}
    out = {n: {"compressed": n >= min_compressed_length(cfg), "edgeinfinite": None,
               "fullkv": None} for n in lengths}
    todo = [(m, n) for m in METHODS for n in lengths if m != "fullkv" or max_fullkv is None or n <= max_fullkv]
    if order == "interleaved":
        groups = [[(m, k) for m, k in todo if k == n] for n in lengths]
    else:
        groups = [[point] for point in todo]
    footprints = {}  # per chunk shape, shared by every probe of this model
    for group in groups:
        sessions, samples = {}, {}
        for m, n in group:  # warm-up: compiles every chunk step and accounts its memory
            probe = PeakProbe(footprints)
            sessions[m] = session = make[m]()
            session.probe = probe
            jax.block_until_ready(session.prefill(tokens[n]))
            session.probe = None
            samples[m] = []
            out[n][m] = {"peak_bytes": probe.peak}
        for _ in range(repeats):
            for m, n in group:
                samples[m].append(_prefill_seconds(sessions[m], tokens[n]))
        for m, n in group:
            s = sessions[m]
            out[n][m].update(ttft_s=statistics.median(samples[m]), ttft_samples=samples[m],
                             cache_bytes=cache_bytes(s.caches, getattr(s, "memory", None)),
                             device_peak_bytes=device_peak_bytes())
        del sessions  # free this group's caches before the next
    return out


# -- report -------------------------------------------------------------------------------------
def goals(r: dict) -> list[dict]:
    """The two goal checks: ``{"name", "status" (PASS / FAIL / not measured), "ratio", "limit", "text"}``."""
    long_n, short_n, peak_limit = PEAK_GOAL
    at, ttft_limit = TTFT_GOAL
    checks = []
    text = f"EdgeInfinite peak at {long_n} <= {peak_limit} x its peak at {short_n}"
    if long_n in r and short_n in r:
        ratio = r[long_n]["edgeinfinite"]["peak_bytes"] / r[short_n]["edgeinfinite"]["peak_bytes"]
        checks.append(dict(name="peak", ratio=ratio, limit=peak_limit, text=text,
                           status="PASS" if ratio <= peak_limit else "FAIL"))
    else:
        missing = [n for n in (short_n, long_n) if n not in r]
        checks.append(dict(name="peak", ratio=None, limit=peak_limit, text=text,
                           status=f"not measured ({', '.join(map(str, missing))} not in --lengths)"))
    text = f"EdgeInfinite TTFT at {at} <= {ttft_limit} x FullKV's"
    if at in r and r[at]["fullkv"] is not None:
        ratio = r[at]["edgeinfinite"]["ttft_s"] / r[at]["fullkv"]["ttft_s"]
        checks.append(dict(name="ttft", ratio=ratio, limit=ttft_limit, text=text,
                           status="PASS" if ratio <= ttft_limit else "FAIL"))
    else:
        why = f"{at} not in --lengths" if at not in r else "FullKV skipped above --max-fullkv-length"
        checks.append(dict(name="ttft", ratio=None, limit=ttft_limit, text=text, status=f"not measured ({why})"))
    return checks


def _cell(point, key, scale=1.0, fmt="{:.3f}"):
    return "skipped" if point is None else fmt.format(point[key] / scale)


def format_report(cfg: ModelConfig, r: dict, chunk: int, repeats: int, batch: int, order: str = "") -> str:
    dev = jax.devices()[0]
    has_dev = any(p is not None and p["device_peak_bytes"] is not None for x in r.values() for p in
                  (x["edgeinfinite"], x["fullkv"]))
    lines = [f"long-context benchmark (EdgeInfinite §4.4, Fig. 3): d_model {cfg.d_model}, {cfg.n_layers} layers, "
             f"{cfg.n_heads}/{cfg.n_kv_heads} heads x {cfg.head_dim}, d_ff {cfg.d_ff} {cfg.ffn}, vocab "
             f"{cfg.vocab_size}, {cfg.dtype}, memory gate hidden {cfg.infini_hidden}, model.kernels {cfg.kernels}; "
             f"batch {batch}; "
             f"{dev.platform} ({dev.device_kind}); random parameters and token ids",
             f"  EdgeInfinite: sink {cfg.infini_sink}, window {cfg.infini_window}, segment {cfg.infini_segment} "
             f"(compresses inputs >= {min_compressed_length(cfg)}); FullKV: chunked full-attention prefill, "
             f"chunk {chunk}",
             f"  TTFT: prefill() wall time to block_until_ready on the logits, compile excluded (a warm-up prefill "
             f"at each length first), median of {repeats} timed prefill(s) per point (1 suffices at long lengths: "
             "one prefill is many chunk steps)" + (f"; order: {order}" if order else ""),
             "  peak: XLA-accounted footprint (argument + output + temporary bytes) of the prefill's largest chunk "
             "step (kv_state.PeakProbe)"]
    if has_dev:
        lines.append("  dev peak: memory_stats()['peak_bytes_in_use'] after each point, the process-wide running "
                     "peak (never reset; EdgeInfinite runs first at every length)")
    head = (f"  {'length':>7} {'EdgeInf TTFT s':>14} {'FullKV TTFT s':>13} {'TTFT ratio':>10} "
            f"{'EdgeInf peak MiB':>16} {'FullKV peak MiB':>15}")
    if has_dev:
        head += f" {'EdgeInf dev MiB':>15} {'FullKV dev MiB':>14}"
    lines.append(head)

    def dev_cell(p):
        return "skipped" if p is None else f"{p['device_peak_bytes'] / MIB:.1f}"

    for n, x in r.items():
        e, f = x["edgeinfinite"], x["fullkv"]
        ratio = "skipped" if f is None else f"{e['ttft_s'] / f['ttft_s']:.3f}"
        row = (f"  {str(n) + ('' if x['compressed'] else '*'):>7} {_cell(e, 'ttft_s'):>14} {_cell(f, 'ttft_s'):>13} "
               f"{ratio:>10} {_cell(e, 'peak_bytes', MIB, '{:.2f}'):>16} {_cell(f, 'peak_bytes', MIB, '{:.2f}'):>15}")
        if has_dev:
            row += f" {dev_cell(e):>15} {dev_cell(f):>14}"
        lines.append(row)
    if not all(x["compressed"] for x in r.values()):
        lines.append(f"  * shorter than sink + window + segment = {min_compressed_length(cfg)}: nothing is "
                     "compressed, EdgeInfinite runs one plain-attention chunk of that many slots")
    for i, g in enumerate(goals(r), 1):
        measured = "" if g["ratio"] is None else f" ({g['ratio']:.3f}x)"
        lines.append(f"  goal {i}: {g['text']}: {g['status']}{measured}")
    return "\n".join(lines)


def to_json(cfg: ModelConfig, r: dict, chunk: int, repeats: int, batch: int, order: str = "") -> dict:
    return {"benchmark": "long-context", "device": str(jax.devices()[0].device_kind),
            "platform": jax.devices()[0].platform, "model": dataclasses.asdict(cfg), "chunk": chunk,
            "repeats": repeats, "batch": batch, "order": order, "min_compressed_length": min_compressed_length(cfg),
            "points": [{"length": n, **x} for n, x in r.items()], "goals": goals(r)}


def write_plot(r: dict, path, title: str = "") -> None:
    """Two panels like Fig. 3: TTFT and peak memory vs input length (log2 x), one line per method."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    for ax, key, scale, ylabel in ((axes[0], "ttft_s", 1.0, "TTFT (s)"),
                                   (axes[1], "peak_bytes", MIB, "peak memory (MiB, XLA accounting)")):
        for m in METHODS:
            pts = [(n, x[m][key] / scale) for n, x in r.items() if x[m] is not None]
            short = [(n, x[m][key] / scale) for n, x in r.items() if x[m] is not None and not x["compressed"]]
            if pts:
                label = KV_METHODS.get(m).label + (" (open: not compressed)" if short and m == "edgeinfinite" else "")
                (line,) = ax.plot(*zip(*pts), marker="o", label=label)
                if short and m == "edgeinfinite":
                    ax.plot(*zip(*short), "o", mfc="white", mec=line.get_color(), zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=120)


def run(args, overrides) -> str:
    if overrides:
        raise ConfigError("--config.* overrides do not apply to long-context; use its flags (--lengths, --sink, ...)")
    repeats = args.repeats if args.repeats is not None else DEFAULT_REPEATS
    args.repeats = repeats
    if args.plot:
        output_file(args.plot, "--plot")
    cfg, lengths = bench_config(args)
    order = "interleaved" if device_peak_bytes() is None else "by-method"
    r = measure(cfg, lengths, args.chunk, repeats, args.max_fullkv_length, args.batch, order=order)
    report = format_report(cfg, r, args.chunk, repeats, args.batch, order)
    if args.json:
        write_json_atomic(args.json, to_json(cfg, r, args.chunk, repeats, args.batch, order))
        report += f"\n  wrote {args.json}"
    if args.plot:
        write_plot(r, args.plot, f"EdgeInfinite vs FullKV (d_model {cfg.d_model}, {cfg.n_layers} layers, "
                   f"{jax.devices()[0].platform})")
        report += f"\n  wrote {args.plot}"
    return report


# --- `edge-jax bench kernels` cases of the segment attention kernel (edge_jax.layers.kernels.segment_attention)


def kernel_case(label: str, B: int, O: int, T: int, S: int, H: int, G: int, K: int, dtype: str, seed: int = 0,
                **blocks) -> KernelCase:
    """B*O parts (O per batch row) of T tokens behind an S-token sink, with a random non-empty memory.
    FLOPs: QK and PV over the S + i + 1 keys of query i, and the readout σ(q) M; bytes: the inputs read
    and the outputs (A_dot in ``dtype``, A_mem float32) written once."""
    dt = jnp.dtype(dtype)
    ks = jax.random.split(jax.random.key(seed), 7)
    shapes = [(B * O, T, H, K), (B * O, T, G, K), (B * O, T, G, K), (B, S, G, K), (B, S, G, K)]
    args = tuple(jax.random.normal(k, sh, jnp.float32).astype(dt) for k, sh in zip(ks, shapes))
    M = 0.1 * jax.random.normal(ks[5], (B * O, G, K, K), jnp.float32)
    z = 1.0 + jnp.abs(jax.random.normal(ks[6], (B * O, G, K), jnp.float32))
    keys = T * S + T * (T + 1) / 2  # key rows seen, summed over one part's queries
    flops = B * O * H * (4 * K * keys + 2 * T * K * (K + 1))
    read = (sum(int(np.prod(sh)) for sh in shapes) * dt.itemsize + 4 * B * O * G * K * (K + 1))
    return KernelCase(label, functools.partial(segment_attention, **blocks), segment_attention_reference,
                      args + (M, z), flops=flops, bytes=read + B * O * T * H * K * (dt.itemsize + 4), dtype=dtype)


def kernel_cases(small: bool) -> list[KernelCase]:
    """small (the CPU interpreter): 4 query / 2 KV heads of 8, a 5-token sink, two 40-token segments in
    16-row blocks (48 grid steps), and a 13-token remaining part. Otherwise the paper's layout (sink 300,
    window 200, segment 2048; §4.1) on the Qwen3-4B shape that stands in for BlueLM-3B
    (configs/edgeinfinite.py): the 4 segments of an input of sink + 4 segments + window tokens, and its
    remaining part (the window: O = (T - sink - window) // segment leaves exactly ``window`` tokens)."""
    if small:
        return [kernel_case(f"2 segments of 40, sink 5, H 4 / G 2 x 8, {dtype}", 1, 2, 40, 5, 4, 2, 8, dtype,
                            block_q=16, block_k=16) for dtype in ("float32", "bfloat16")] + [
                kernel_case("remaining part of 13, sink 5, H 4 / G 2 x 8, bfloat16", 2, 1, 13, 5, 4, 2, 8, "bfloat16")]
    from edge_jax.models.presets import MODEL_SIZES
    a = MODEL_SIZES["qwen3_4b"]
    shape = (a["n_heads"], a["n_kv_heads"], a["head_dim"], "bfloat16")
    S, W, T, O = DEFAULT_SINK, DEFAULT_WINDOW, DEFAULT_SEGMENT, 4
    head = f"Qwen3-4B shape ({a['n_heads']} / {a['n_kv_heads']} heads x {a['head_dim']}), sink {S}"
    return [kernel_case(f"{head}, {O} segments of {T}", 1, O, T, S, *shape),
            kernel_case(f"{head}, remaining part of {W} (T = {S + O * T + W})", 1, 1, W, S, *shape)]


KERNEL_CASES.register("segment_attention", kernel_cases)
