"""One measurement of ``edge-jax bench data``, in a fresh process so that its peak memory is its own::

    python -m edge_jax.bench.data_probe '{"mode": "stream" | "minimal", "name": "jsonl:DIR/*.jsonl", ...}'

prints one line ``RESULT {json}``: seconds to the first batch (from just before the tokenizer is built),
tokens/s over the timed batches after it (whole and per stretch), and the peak resident memory of this
process alone and with its child processes (grain workers), sampled every 50 ms. ``stream`` is the
library's train iterator (:func:`edge_jax.data.make_train_iter`); ``minimal`` is the plain loop it is held
against: pyarrow record batches of the text column, the tokenizer's batch encode, eos after every
document, numpy windows of seq_len + 1 tokens (stride seq_len) cut into batches.
"""
from __future__ import annotations

import glob
import json
import sys
import threading
import time
from typing import Iterator

import numpy as np

PREFIX = "RESULT "


class PeakMemory:
    """Peak RSS of this process alone and summed with all its descendants, sampled by a daemon thread."""

    def __init__(self, every_s: float = 0.05):
        import psutil
        self.proc, self.every_s = psutil.Process(), every_s
        self.main = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        main = total = self.proc.memory_info().rss
        for child in self.proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except Exception:  # noqa: BLE001 - a child that just ended
                pass
        self.main, self.total = max(self.main, main), max(self.total, total)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def read_texts(kind: str, paths: list[str], rows: int = 256) -> Iterator[list[str]]:
    """The text column in pyarrow record batches, file after file (parquet: ``iter_batches`` of ``rows``; JSONL:
    the streaming ``pyarrow.json.open_json`` reader, 1 MB blocks, about as many rows). Batches this small keep
    the loop's bursts (one encode call each) short against the timed seconds."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    for path in paths:
        if kind == "parquet":
            for batch in pq.ParquetFile(path).iter_batches(batch_size=rows, columns=["text"]):
                yield batch.column(0).to_pylist()
        else:
            reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=1 << 20))
            for batch in reader:
                yield batch.column("text").to_pylist()


def token_stream(kind: str, paths: list[str], tok) -> Iterator[np.ndarray]:
    """int32 tokens of each record batch: every document's ids followed by eos."""
    eos = np.array([tok.eos_id], np.int32)
    for texts in read_texts(kind, paths):
        parts = []
        for ids in tok.encode_many(texts):
            parts += (ids, eos)
        yield np.concatenate(parts, dtype=np.int32)


def minimal_batches(kind: str, paths: list[str], tok, batch: int, seq_len: int,
                    epochs: int | None = None) -> Iterator[dict]:
    """{"inputs", "targets"}: int32[batch, seq_len] of consecutive windows of the files' token stream
    (seq_len + 1 tokens, stride seq_len), over the files ``epochs`` times (None: forever)."""
    need, buf, epoch = batch * seq_len + 1, np.zeros(0, np.int32), 0
    while epochs is None or epoch < epochs:
        for tokens in token_stream(kind, paths, tok):
            buf = np.concatenate([buf, tokens]) if len(buf) else tokens
            while len(buf) >= need:
                windows = np.lib.stride_tricks.sliding_window_view(buf[:need], seq_len + 1)[::seq_len]
                yield {"inputs": np.ascontiguousarray(windows[:, :-1]), "targets": np.ascontiguousarray(windows[:, 1:])}
                buf = buf[need - 1:]
        epoch += 1


def data_config(spec: dict):
    """The data config of the library's iterator for a probe spec."""
    import ml_collections
    return ml_collections.ConfigDict(dict(
        name=spec["name"], tokenizer=spec["tokenizer"], seq_len=spec["seq_len"], batch_size=spec["batch"],
        data_dir=spec["data_dir"], text_key="text", facts_entities=2000, longctx_length=4096,
        longctx_examples=200, stream="on", workers=spec["workers"], shuffle_windows=64, tokens_dir=""))


def _iterator(spec: dict):
    from edge_jax.data import get_tokenizer, make_train_iter
    cfg = data_config(spec)
    tok = get_tokenizer(spec["tokenizer"], cfg, spec["data_dir"])
    if spec["mode"] == "stream":
        return make_train_iter(cfg, tok, seed=0)
    kind, _, pattern = spec["name"].partition(":")
    return minimal_batches(kind, sorted(glob.glob(pattern)), tok, spec["batch"], spec["seq_len"])


def _rates(stamps: list[float], per_batch: int, segments: int) -> list[float]:
    """tokens/s of ``segments`` stretches of about equal time of the timed batches (``stamps[0]``: the start)."""
    at = np.searchsorted(stamps, np.linspace(stamps[0], stamps[-1], segments + 1)[1:-1])
    cuts = np.unique(np.concatenate([[0], at, [len(stamps) - 1]]))
    return [(b - a) * per_batch / (stamps[b] - stamps[a]) for a, b in zip(cuts[:-1], cuts[1:])]


def _timed(it, spec: dict) -> list[float]:
    """Batch times after a warm-up of ``warmup_s`` (which drains what was prefetched while the first batch was
    awaited), until ``tokens`` tokens or ``seconds`` seconds are timed; ``[start, end of batch 1, ...]``."""
    per_batch, start = spec["batch"] * spec["seq_len"], time.perf_counter()
    while time.perf_counter() - start < spec.get("warmup_s", 0):
        next(it)
    stamps = [time.perf_counter()]
    while (len(stamps) - 1) * per_batch < spec["tokens"] and stamps[-1] - stamps[0] < spec["seconds"]:
        next(it)
        stamps.append(time.perf_counter())
    return stamps


def measure(spec: dict) -> dict:
    """Time to the first batch, tokens/s after it and the peak memory of one iterator (``spec``: mode, name,
    tokenizer, seq_len, batch, data_dir, workers, tokens, seconds, warmup_s, segments)."""
    import edge_jax.data  # noqa: F401  (imported before the clock starts, as in a training run)
    memory = PeakMemory()
    t0 = time.perf_counter()
    it = _iterator(spec)
    batch = next(it)
    first_s = time.perf_counter() - t0
    expect = (spec["batch"], spec["seq_len"])
    if batch["inputs"].shape != expect:
        raise RuntimeError(f"first batch has shape {batch['inputs'].shape}, expected {expect}")
    stamps = _timed(it, spec)
    memory.stop()
    if hasattr(it, "close"):
        it.close()
    per_batch = spec["batch"] * spec["seq_len"]
    timed = (len(stamps) - 1) * per_batch
    return {"first_batch_s": first_s, "tokens_per_s": timed / (stamps[-1] - stamps[0]),
            "rates": _rates(stamps, per_batch, spec.get("segments", 5)), "timed_tokens": timed,
            "timed_s": stamps[-1] - stamps[0], "peak_main_mb": memory.main / 2**20,
            "peak_total_mb": memory.total / 2**20}


if __name__ == "__main__":
    result = measure(json.loads(sys.argv[1]))
    print(PREFIX + json.dumps(result), flush=True)
