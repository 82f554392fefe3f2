"""``edge-jax bench data``: the library's streamed train iterator against a minimal loop over the same files.

On generated corpora (:mod:`edge_jax.bench.corpus`: by default 100 MB, 1 GB and 3 GB of English-like
documents, as JSONL and as parquet) and three tokenizers (``byte``; ``spm_file:`` an 8192-piece
sentencepiece BPE and ``hf:`` an 8192-piece byte-level BPE, both trained here once on a 5 MB sample of
the corpus and cached), every measurement runs in a fresh process (:mod:`edge_jax.bench.data_probe`):
the iterator at each ``--workers`` count of grain workers, and beside it the minimal loop (pyarrow record
batches, the tokenizer's batch encode, numpy windows). Reported per cell: tokens/s of the process (with
its workers), the ratio to the minimal loop on the same corpus and tokenizer, peak resident memory (the
process with its workers, and alone) and seconds to the first batch. Then the goals: peak memory flat
across corpus sizes (max/min <= 1.10), first batch under 10 s, iterator >= 0.9x the minimal loop, and
how many workers a host needs for the per-host token rate of the paper presets' compile tables
(``results/*/paper_compile.json``), extrapolated from the measured 1 -> 2 worker scaling.
"""
from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys

from edge_jax.bench.corpus import corpus_dir, corpus_info, corpus_path, is_complete, sample, size_label
from edge_jax.bench.data_probe import PREFIX
from edge_jax.bench.host_rate import paper_host_rate
from edge_jax.errors import ConfigError
from edge_jax.utils.args import output_dir

GOALS = {"memory": 1.10, "first_batch_s": 10.0, "ratio": 0.9}
TOKENIZER_VOCAB = 8192


def default_root() -> str:
    from edge_jax.data import data_dir_default
    return os.path.join(data_dir_default(), "bench", "corpora")


# --- tokenizers ------------------------------------------------------------------------------------------

def tokenizer_specs(root: str, names: list[str], seed: int = 0) -> dict[str, str]:
    """Tokenizer specs by name (byte, spm, hf); spm and hf are trained once on a 5 MB sample, cached in ``root``."""
    specs, texts = {}, None
    for name in names:
        if name == "byte":
            specs[name] = "byte"
            continue
        if name not in ("spm", "hf"):
            raise ValueError(f"tokenizer {name!r}: use byte, spm or hf")
        path = os.path.join(root, f"{name}{TOKENIZER_VOCAB}-seed{seed}", "spm.model" if name == "spm" else
                            "tokenizer.json")
        if not os.path.exists(path):
            texts = texts or sample(seed, 5_000_000)
            _progress(f"training the {name} tokenizer ({TOKENIZER_VOCAB} pieces) on {len(texts)} documents")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            (train_spm if name == "spm" else train_hf)(texts, path)
        specs[name] = f"spm_file:{path}" if name == "spm" else f"hf:{path}"
    return specs


def train_spm(texts: list[str], path: str) -> None:
    from edge_jax.data.tokenizers import train_spm as train
    train(texts, TOKENIZER_VOCAB, path)


def train_hf(texts: list[str], path: str) -> None:
    """A byte-level BPE (GPT-2 style) with the special token <|endoftext|> (its eos), written atomically."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.save(path + ".tmp")
    os.replace(path + ".tmp", path)


# --- measurements ----------------------------------------------------------------------------------------

def _progress(line: str) -> None:
    print(f"[bench data] {line}", file=sys.stderr, flush=True)


def probe(spec: dict, timeout: float) -> dict:
    """One measurement in a fresh process (its own session, so a timed-out one is killed with its workers)."""
    proc = subprocess.Popen([sys.executable, "-m", "edge_jax.bench.data_probe", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"timed out after {timeout:g} s"}
    found = [line for line in out.splitlines() if line.startswith(PREFIX)]
    if proc.returncode or not found:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:300]}"}
    return json.loads(found[-1][len(PREFIX):])


def measure(spec: dict, repeats: int, timeout: float) -> dict:
    """``repeats`` probes of one cell: median tokens/s with its min..max over the runs (one run: over its timed
    stretches), median and worst first batch, highest peak memory."""
    runs = [probe(spec, timeout) for _ in range(repeats)]
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0]["error"], "runs": runs}
    spread = [r["tokens_per_s"] for r in good] if len(good) > 1 else good[0]["rates"]
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in good),
            "min": min(spread), "max": max(spread),
            "first_batch_s": statistics.median(r["first_batch_s"] for r in good),
            "worst_first_batch_s": max(r["first_batch_s"] for r in good),
            "peak_total_mb": max(r["peak_total_mb"] for r in good),
            "peak_main_mb": max(r["peak_main_mb"] for r in good),
            "runs": runs}


def _cells(args, corpora: dict, specs: dict, workers: list[int], data_dir: str):
    """(key, probe spec) of every measurement; key = (format, size, tokenizer, reader), reader 'minimal' or W."""
    common = dict(seq_len=args.seq_len, batch=args.batch_size, data_dir=data_dir, tokens=int(args.tokens),
                  seconds=args.seconds, warmup_s=args.warmup, segments=args.segments)
    for (fmt, size), folder in corpora.items():
        for tname, tspec in specs.items():
            base = dict(common, name=f"{fmt}:{folder}/*.{fmt}", tokenizer=tspec)
            yield (fmt, size, tname, "minimal"), dict(base, mode="minimal", workers=0)
            for w in workers:
                yield (fmt, size, tname, w), dict(base, mode="stream", workers=w)


# --- report ----------------------------------------------------------------------------------------------

def _reader(reader) -> str:
    return "minimal" if reader == "minimal" else f"stream w{reader}"


def _label(key) -> str:
    fmt, size, tname, reader = key
    return f"{fmt} {size_label(size)} {tname} {_reader(reader)}"


def table(results: dict) -> list[str]:
    head = (f"{'format':<8}{'size':>6}  {'tokenizer':<10}{'reader':<11}{'Mtok/s':>9} {'(min..max)':<17}{'ratio':>6}"
            f"{'peak MB':>9}{'main MB':>9}{'first s':>9}")
    lines = [head, "-" * len(head)]
    for key, m in results.items():
        fmt, size, tname, reader = key
        left = f"{fmt:<8}{size_label(size):>6}  {tname:<10}{_reader(reader):<11}"
        if "error" in m:
            lines.append(f"{left}failed: {m['error']}")
            continue
        base = results.get((fmt, size, tname, "minimal"), {})
        has_base = reader != "minimal" and "tokens_per_s" in base
        ratio = f"{m['tokens_per_s'] / base['tokens_per_s']:.2f}" if has_base else "-"
        spread = f"({m['min'] / 1e6:.2f}..{m['max'] / 1e6:.2f})"
        lines.append(f"{left}{m['tokens_per_s'] / 1e6:9.2f} {spread:<17}{ratio:>6}{m['peak_total_mb']:9.0f}"
                     f"{m['peak_main_mb']:9.0f}{m['first_batch_s']:9.2f}")
    return lines


def _verdict(ok: bool) -> str:
    return "goal met" if ok else "goal missed"


def goal_lines(results: dict, sizes: list[int]) -> list[str]:
    """Memory flatness across sizes, worst first batch, worst iterator/minimal ratio (iterator cells only)."""
    ok = {k: v for k, v in results.items() if "error" not in v}
    streams = {k: v for k, v in ok.items() if k[3] != "minimal"}
    out = []
    groups = {}
    for (fmt, size, tname, reader), m in streams.items():
        groups.setdefault((fmt, tname, reader), []).append(m["peak_total_mb"])
    flat = {g: max(v) / min(v) for g, v in groups.items() if len(v) > 1}
    if flat:
        g = max(flat, key=flat.get)
        out.append(f"peak memory across sizes ({', '.join(map(size_label, sizes))}): worst max/min {flat[g]:.3f} "
                   f"({g[0]} {g[1]} {_reader(g[2])}) (goal <= {GOALS['memory']:.2f}): "
                   f"{_verdict(flat[g] <= GOALS['memory'])}")
    else:
        out.append("peak memory across sizes: needs two sizes or more (--sizes)")
    if streams:
        k = max(streams, key=lambda k: streams[k]["worst_first_batch_s"])
        first = streams[k]["worst_first_batch_s"]
        out.append(f"time to first batch: worst {first:.2f} s ({_label(k)}) (goal < {GOALS['first_batch_s']:g} s): "
                   f"{_verdict(first < GOALS['first_batch_s'])}")
    ratios = {k: v["tokens_per_s"] / ok[(*k[:3], "minimal")]["tokens_per_s"] for k, v in streams.items()
              if (*k[:3], "minimal") in ok}
    if ratios:
        k = min(ratios, key=ratios.get)
        out.append(f"iterator / minimal loop: worst {ratios[k]:.2f} ({_label(k)}) (goal >= {GOALS['ratio']}): "
                   f"{_verdict(ratios[k] >= GOALS['ratio'])}")
    bad = [k for k, v in results.items() if "error" in v]
    if bad:
        out.append(f"failed measurements: {len(bad)} ({'; '.join(_label(k) for k in bad[:4])}): "
                   "the goals above leave them out")
    return out


def scaling_lines(results: dict, workers: list[int]) -> list[str]:
    """Per tokenizer and format, on the largest corpus: tokens/s at the two smallest worker counts, their
    ratio, and the workers one host needs for the paper presets' rate (linear in the measured gain)."""
    need, where = paper_host_rate()
    out = [f"per-host rate the paper presets need: {need:,.0f} tokens/s ({where})"]
    counts = sorted(w for w in workers if w > 0)[:2]
    if len(counts) < 2:
        return out + ["  scaling: needs two positive worker counts (--workers 1,2)"]
    (wa, wb), largest = counts, max(k[1] for k in results)
    cores = os.cpu_count() or 1
    for fmt, tname in dict.fromkeys((k[0], k[2]) for k in results):
        a, b = (results.get((fmt, largest, tname, w), {}) for w in (wa, wb))
        if "tokens_per_s" not in a or "tokens_per_s" not in b:
            continue
        ra, rb = a["tokens_per_s"], b["tokens_per_s"]
        gain = (rb - ra) / (wb - wa)
        if max(ra, rb) >= need:
            verdict = f"reached with {wa if ra >= need else wb} worker(s), measured"
        elif gain > 0:
            verdict = f"needs ~{wb + math.ceil((need - rb) / gain)} workers at +{gain / 1e6:.2f}M tok/s per worker"
        else:
            verdict = "not reached: the extra worker added nothing here"
        ideal = math.ceil(need * wa / ra)
        out.append(f"  {fmt} {size_label(largest)} {tname}: {ra / 1e6:.2f}M tok/s at {wa} worker(s), "
                   f"{rb / 1e6:.2f}M at {wb} (x{rb / ra:.2f}, {rb / ra * wa / wb:.0%} per worker); {verdict}; "
                   f"{ideal} at perfect scaling")
    out.append(f"  (measured on {cores} CPU core(s); a worker is a process that wants a core of its own)")
    return out


# --- the benchmark ---------------------------------------------------------------------------------------

def _corpora(root: str, formats: list[str], sizes: list[int], seed: int) -> tuple[dict, list[str]]:
    corpora, lines = {}, []
    for fmt in formats:
        for size in sizes:
            how = "cached" if is_complete(corpus_path(root, fmt, size, seed)) else "new"
            if how == "new":
                _progress(f"generating the {fmt} {size_label(size)} corpus")
            corpora[(fmt, size)] = folder = corpus_dir(root, fmt, size, seed)
            info = corpus_info(folder)
            lines.append(f"  {fmt} {size_label(size)}: {info['files']} file(s), {info['documents']:,} documents, "
                         f"{info['text_bytes'] / 1e6:,.0f} MB of text, {how} (generated at {info['mb_per_s']} MB/s by "
                         f"{info.get('processes', 1)} process(es)); {folder}")
    return corpora, lines


def _header(args) -> str:
    return (f"data benchmark: batch {args.batch_size} x seq_len {args.seq_len}; each cell a fresh process: first "
            f"batch, {args.warmup:g} s warm-up, then up to {args.tokens / 1e6:g}M tokens or {args.seconds:g} s timed; "
            f"{args.repeats} run(s) a cell (median, min..max over the runs; one run: over {args.segments} stretches "
            f"of it); {os.cpu_count()} CPU cores")


def run(args, overrides) -> str:
    """Generate (or reuse) the corpora and tokenizers, measure every cell, return the report."""
    from edge_jax.data import data_dir_default
    if overrides:
        raise ConfigError("edge-jax bench data takes no --config.* overrides: it builds its own data config "
                          "(see its flags: --seq-len, --batch-size, --workers, ...)")
    root = os.path.expanduser(args.corpus_dir or default_root())
    output_dir(root, "--corpus-dir")
    if args.shards:
        from edge_jax.bench.shard_reads import run as shard_reads
        return shard_reads(args, root)
    sizes, formats, workers = args.sizes, args.formats, args.workers
    corpora, corpus_lines = _corpora(root, formats, sizes, args.seed)
    specs = tokenizer_specs(os.path.join(root, "tokenizers"), args.tokenizers, args.seed)
    data_dir = data_dir_default()
    results = {}
    for key, spec in _cells(args, corpora, specs, workers, data_dir):
        results[key] = m = measure(spec, args.repeats, args.timeout)
        _progress(f"{_label(key)}: " + (m["error"] if "error" in m else f"{m['tokens_per_s'] / 1e6:.2f}M tok/s, "
                                        f"first batch {m['first_batch_s']:.2f} s"))
    lines = [_header(args), "corpora:", *corpus_lines,
             "tokenizers: " + ", ".join(f"{k} = {v}" for k, v in specs.items()), "",
             *table(results), "", *goal_lines(results, sizes), *scaling_lines(results, workers)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cells": [{"key": list(k), **v} for k, v in results.items()], "report": lines}, f, indent=1)
    return "\n".join(lines)
