"""``edge-jax bench data``: the streamed input pipeline against a minimal loop over the same files.

For generated corpora (:mod:`edge_jax.bench.corpus`; default 100 MB, 1 GB and 3 GB, JSONL and parquet)
and the byte, ``spm_file:`` and ``hf:`` tokenizers (an 8192-piece sentencepiece BPE and an 8192-piece
byte-level HF BPE, trained here on a 5 MB sample), every measurement runs in a fresh process
(:mod:`edge_jax.bench.data_probe`): the stream with 1 and 2 grain workers, and the minimal loop (pyarrow
record batches, the tokenizer's batch encode, numpy windows) in the same run. Reported: tokens/s of the
process (median and range over timed stretches), its ratio to the minimal loop, peak resident memory
(the process with its workers) and seconds to the first batch; then the goals: memory flat across corpus
sizes (max/min <= 1.10), first batch under 10 s, stream >= 0.9x the minimal loop, and the workers a host
needs for the token rate of the paper presets' compile tables (``results/*/paper_compile.json``),
extrapolated from the measured 1 -> 2 worker scaling.
"""
from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys

from edge_jax.bench import Benchmark
from edge_jax.bench.corpus import corpus_dir, documents, parse_size
from edge_jax.registry import BENCHMARKS

CHIPS_PER_HOST = 4   # TPU v4/v5e/v5p/v6e VMs of a multi-host slice hold 4 chips (compile.chips: 2x2x1 per host)
GOALS = {"memory": 1.10, "first_batch_s": 10.0, "ratio": 0.9}


def add_arguments(g) -> None:
    g.add_argument("--sizes", default="100M,1G,3G", help="corpus sizes in text bytes (default 100M,1G,3G)")
    g.add_argument("--formats", default="jsonl,parquet", help="corpus formats (default jsonl,parquet)")
    g.add_argument("--tokenizers", default="byte,spm,hf", help="tokenizers (default byte,spm,hf)")
    g.add_argument("--workers", default="1,2", help="grain worker counts of the stream (default 1,2)")
    g.add_argument("--tokens", type=int, default=20_000_000, help="tokens timed per measurement (default 20M)")
    g.add_argument("--segments", type=int, default=5, help="timed stretches per measurement (median, range)")
    g.add_argument("--corpus-dir", default="", help="where corpora are generated (default <data dir>/bench/corpora)")
    g.add_argument("--seq-len", type=int, default=2048, help="tokens per window (default 2048)")
    g.add_argument("--rows", type=int, default=8, help="batch rows this process reads (default 8)")


def _tokenizers(root: str, names: list[str]) -> dict[str, str]:
    """Tokenizer specs by name; the trained ones are made once on a 5 MB sample and cached under ``root``."""
    import itertools
    os.makedirs(root, exist_ok=True)
    sample = None
    specs = {}
    for name in names:
        if name == "byte":
            specs[name] = "byte"
            continue
        path = os.path.join(root, "spm8192.model" if name == "spm" else "hf8192/tokenizer.json")
        if not os.path.exists(path):
            sample = sample or list(itertools.islice(documents(seed=1), 1500))
            (_train_spm if name == "spm" else _train_hf)(sample, path)
        specs[name] = f"{'spm_file' if name == 'spm' else 'hf'}:{path}"
    return specs


def _train_spm(sample: list[str], path: str) -> None:
    from edge_jax.data.tokenizers import train_spm
    train_spm(sample, 8192, path)


def _train_hf(sample: list[str], path: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(sample, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tok.save(path)


def _probe(spec: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "edge_jax.bench.data_probe", json.dumps(spec)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode:
        raise RuntimeError(f"probe {spec['mode']} {spec['name']} failed: {out.stderr.strip()[-800:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def paper_host_rate() -> tuple[float, str]:
    """The highest per-host token rate of the committed paper-preset compile tables, and where it is from."""
    from edge_jax.compile.chips import slice_shape
    best, where = 0.0, "no compile table found"
    for path in sorted(glob.glob("results/*/paper_compile.json")):
        with open(path) as f:
            tables = json.load(f)
        for topology, table in tables.items():
            chips = math.prod(int(x) for x in slice_shape(topology)[1].split("x"))
            hosts = max(1, chips // CHIPS_PER_HOST)
            for cell, row in table.get("rows", {}).items():
                rate = float(str(row.get("est. tokens/s", "0")).replace(",", "") or 0) / hosts
                if rate > best:
                    best, where = rate, f"{path} {topology} {cell} ({hosts} hosts)"
    return best, where


def _row(label: str, m: dict, base: dict | None) -> str:
    ratio = f"{m['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "-"
    return (f"{label:<34} {m['tokens_per_s'] / 1e6:8.2f} ({min(m['rates']) / 1e6:.2f}..{max(m['rates']) / 1e6:.2f})"
            f" {ratio:>6} {m['peak_total_mb']:8.0f} {m['peak_main_mb']:7.0f} {m['first_batch_s']:7.2f}")


def run(args, overrides) -> str:
    from edge_jax.data import data_dir_default
    data_dir = data_dir_default()
    root = args.corpus_dir or os.path.join(data_dir, "bench", "corpora")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    formats, workers = args.formats.split(","), [int(w) for w in args.workers.split(",")]
    specs = _tokenizers(os.path.join(root, "tokenizers"), args.tokenizers.split(","))
    common = dict(seq_len=args.seq_len, rows=args.rows, tokens=args.tokens, segments=args.segments, data_dir=data_dir)
    lines = [f"edge-jax bench data: {args.rows} rows x {args.seq_len} tokens per batch, {args.tokens:,} tokens timed "
             f"in {args.segments} stretches per measurement; Mtok/s median (min..max), ratio to the minimal loop, "
             "peak RSS MB (with workers, main alone), seconds to the first batch", "",
             f"{'corpus / tokenizer / reader':<34} {'Mtok/s':>8} {'':13} {'ratio':>6} {'RSS':>8} {'main':>7} {'first':>7}"]
    results = {}
    for fmt in formats:
        for size in sizes:
            folder = corpus_dir(root, fmt, size)
            name = f"{fmt}:{folder}/*.{fmt}"
            for tname, tspec in specs.items():
                base = _probe({**common, "mode": "minimal", "name": name, "tokenizer": tspec, "workers": 0})
                results[(fmt, size, tname, "minimal")] = base
                lines.append(_row(f"{fmt} {size / 1e9:g} GB {tname} minimal", base, None))
                for w in workers:
                    m = _probe({**common, "mode": "stream", "name": name, "tokenizer": tspec, "workers": w})
                    results[(fmt, size, tname, w)] = m
                    lines.append(_row(f"{fmt} {size / 1e9:g} GB {tname} stream w={w}", m, base))
    lines += ["", *summary(results, formats, sizes, list(specs), workers)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({" ".join(map(str, k)): v for k, v in results.items()}, f, indent=1)
    return "\n".join(lines)


def summary(results: dict, formats, sizes, tokenizers, workers) -> list[str]:
    def verdict(ok: bool) -> str:
        return "goal met" if ok else "goal missed"
    streams = {k: v for k, v in results.items() if k[3] != "minimal"}
    flat = max(max(results[(f, s, t, w)]["peak_total_mb"] for s in sizes) /
               min(results[(f, s, t, w)]["peak_total_mb"] for s in sizes)
               for f in formats for t in tokenizers for w in workers)
    first = max(v["first_batch_s"] for v in streams.values())
    ratios = {k: v["tokens_per_s"] / results[(*k[:3], "minimal")]["tokens_per_s"] for k, v in streams.items()}
    worst = min(ratios, key=ratios.get)
    out = [f"peak memory across sizes, worst max/min: {flat:.3f} (goal <= {GOALS['memory']}): "
           f"{verdict(flat <= GOALS['memory'])}",
           f"slowest first batch: {first:.2f} s (goal < {GOALS['first_batch_s']:g} s): "
           f"{verdict(first < GOALS['first_batch_s'])}",
           f"worst stream / minimal loop: {ratios[worst]:.2f} ({' '.join(map(str, worst))}) (goal >= {GOALS['ratio']}): "
           f"{verdict(ratios[worst] >= GOALS['ratio'])}"]
    need, where = paper_host_rate()
    out.append(f"per-host rate the paper presets need: {need:,.0f} tokens/s ({where})")
    if len(workers) >= 2 and need:
        w1, w2 = sorted(workers)[:2]
        for t in tokenizers:
            r1 = min(results[(f, s, t, w1)]["tokens_per_s"] for f in formats for s in sizes)
            r2 = min(results[(f, s, t, w2)]["tokens_per_s"] for f in formats for s in sizes)
            per_worker = r2 / w2 if r2 > r1 else r1 / w1
            n = math.ceil(need / per_worker)
            out.append(f"  {t}: {r1:,.0f} tok/s at {w1} worker(s), {r2:,.0f} at {w2} (x{r2 / r1:.2f}); at "
                       f"{per_worker:,.0f} per worker a host needs {n} worker(s) (one core each): "
                       f"{'reached' if n <= 64 else 'not reachable on one host'}")
    return out


BENCHMARKS.register("data", Benchmark(
    help="the streamed input pipeline against a minimal pyarrow + tokenizer loop: tokens/s, peak memory, "
         "first-batch time over 100 MB - 3 GB corpora (docs/data.md)",
    run=run, add_arguments=add_arguments, defaults={"repeats": 1}))
