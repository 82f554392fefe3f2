"""``edge-jax bench data --shards PLACE[,PLACE...]``: reading prepared token shards, from this machine's disk
and from a copy at each PLACE (a directory, or a bucket: ``gs://...``), as the train iterator reads them.

The shards are those of the benchmark's first corpus (``--sizes``: its first size, JSONL, the byte
tokenizer), prepared once beside the corpora and copied to each PLACE unless an equal copy is there. A batch
is ``--batch-size`` training windows of ``--seq-len`` + 1 tokens at random, read in blocks of K consecutive
windows (``data.windows_per_read``, each K of ``--windows-per-read``) with the iterator's own call
(:meth:`edge_jax.data.pipeline.Windows.blocks`: one round of merged, concurrent ranged reads a batch in a
bucket). Timed per cell: tokens/s over ``--segments`` stretches (median, min..max) until ``--seconds`` or
``--tokens``, after one untimed batch; and the reads (requests) a batch takes. Beside them: the ratio to the
local disk at the same K, and the per-host token rate of the paper presets
(:func:`edge_jax.bench.host_rate.paper_host_rate`). One reader thread: the iterator's prefetch threads read ahead
of it, so this is the floor of what training gets.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np

from edge_jax.utils.atomic import copy_tree_atomic
from edge_jax.utils.storage import epath, is_remote


def _say(line: str) -> None:
    print(f"[bench data --shards] {line}", file=sys.stderr, flush=True)


def prepared(root: str, size: int, seed: int) -> str:
    """The directory of the train shards of the benchmark's JSONL corpus of ``size`` bytes (byte tokenizer),
    prepared under ``root`` once."""
    from edge_jax.bench.corpus import corpus_dir, corpus_path, is_complete
    from edge_jax.data import get_tokenizer, resolve
    from edge_jax.data.shards import is_prepared, prepare, shards_dir
    if not is_complete(corpus_path(root, "jsonl", size, seed)):
        _say(f"generating the jsonl corpus of {size:,} bytes")
    folder = corpus_dir(root, "jsonl", size, seed)
    name = f"jsonl:{folder}/*.jsonl"
    source, tok = resolve(name), get_tokenizer("byte", name)
    tokens = os.path.join(root, "shard-reads")
    if not is_prepared(shards_dir(tokens, source, "train", tok)):
        _say(f"preparing the shards of {folder}")
    return prepare(source, "train", tok, tokens)


def copy_to(local: str, place: str) -> str:
    """A copy of the shard directory ``local`` under ``place`` (kept when its manifest is the same)."""
    target = f"{place.rstrip('/')}/{os.path.basename(local)}"
    manifest = (epath(local) / "manifest.json").read_text()
    there = epath(target) / "manifest.json"
    if there.exists() and there.read_text() == manifest:
        return target
    _say(f"copying {local} to {target}")
    copy_tree_atomic(local, target, last=("manifest.json",))  # a copy cut short has no manifest: copied again
    return target


def measure(where: str, seq_len: int, batch: int, per: int, seconds: float, tokens: int, segments: int,
            seed: int = 0) -> dict:
    """Tokens/s of reading random batches of ``batch`` windows in blocks of ``per`` from the shards at ``where``,
    over ``segments`` stretches, and the reads a batch takes."""
    from edge_jax.data.pipeline import Windows
    from edge_jax.data.shards import TokenShards
    windows = Windows(TokenShards([where]), seq_len)
    blocks, rng = windows.total // per, np.random.default_rng(seed)
    if batch % per or blocks < batch // per:
        return {"error": f"--batch-size {batch} is not a multiple of {per}, or the shards hold fewer windows"}

    def one() -> int:
        ids = rng.choice(blocks, batch // per, replace=False)
        starts = ((ids[:, None] * per + np.arange(per)).reshape(-1)) * seq_len
        windows.blocks(ids, per)
        return len(windows.tokens.read_plan(starts, seq_len + 1))

    one()  # connections opened, the first request's latency out of the timing
    per_batch, rates, done = [], [], 0
    stretch = seconds / segments
    for _ in range(segments):
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < stretch and done < tokens:
            per_batch.append(one())
            n, done = n + 1, done + batch * seq_len
        rates.append(n * batch * seq_len / (time.perf_counter() - t0))
        if done >= tokens:
            break
    return {"tokens_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
            "requests_per_batch": statistics.mean(per_batch), "batches": len(per_batch)}


def run(args, root: str) -> str:
    """The report; ``root``: where the corpora are cached (``--corpus-dir``)."""
    from edge_jax.bench.host_rate import paper_host_rate
    local = prepared(root, args.sizes[0], args.seed)
    info = json.loads((epath(local) / "manifest.json").read_text())
    total = sum(s["tokens"] for s in info["shards"])
    places = [("local disk", local)] + [(p, copy_to(local, p)) for p in args.shards]
    need, need_from = paper_host_rate()
    results = {}
    for label, where in places:
        for per in args.windows_per_read:
            m = measure(where, args.seq_len, args.batch_size, per, args.seconds, int(args.tokens), args.segments)
            results[(label, per)] = m
            _say(f"{label} K={per}: " + (m["error"] if "error" in m else f"{m['tokens_per_s'] / 1e6:.2f}M tok/s, "
                                         f"{m['requests_per_batch']:.1f} reads a batch"))
    head = f"{'shards':<34}{'K':>4}{'Mtok/s':>9} {'(min..max)':<17}{'reads/batch':>12}{'vs disk':>9}{'vs need':>9}"
    lines = [f"shard reads: {len(info['shards'])} shards, {total:,} tokens ({info['dtype']}); batch {args.batch_size} "
             f"x seq_len {args.seq_len}, K consecutive windows a block; up to {args.seconds:g} s or "
             f"{args.tokens / 1e6:g}M tokens a cell over {args.segments} stretches (median, min..max); one reader "
             f"thread; {os.cpu_count()} CPU cores", f"per-host need: {need:,.0f} tokens/s ({need_from})", head,
             "-" * len(head)]
    for (label, per), m in results.items():
        left = f"{label[-34:]:<34}{per:>4}"
        if "error" in m:
            lines.append(f"{left}  {m['error']}")
            continue
        disk = results.get(("local disk", per), {}).get("tokens_per_s")
        versus = f"{m['tokens_per_s'] / disk:.2f}x" if disk else "-"
        spread = f"({m['min'] / 1e6:.2f}..{m['max'] / 1e6:.2f})"
        lines.append(f"{left}{m['tokens_per_s'] / 1e6:9.2f} {spread:<17}{m['requests_per_batch']:12.1f}{versus:>9}"
                     f"{m['tokens_per_s'] / need:8.1f}x")
    remote = [label for label, where in places if is_remote(where)]
    if remote:
        lines.append(f"(a bucket's reads of a batch are concurrent requests; {', '.join(remote)} as reached from here)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cells": [{"shards": k[0], "windows_per_read": k[1], **v} for k, v in results.items()],
                       "report": lines}, f, indent=1)
    return "\n".join(lines)
