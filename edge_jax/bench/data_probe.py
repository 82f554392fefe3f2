"""One measurement of ``edge-jax bench data``, in a fresh process so that its peak memory is its own:

    python -m edge_jax.bench.data_probe '{"mode": "stream" | "minimal", "name": "jsonl:DIR/*.jsonl", ...}'

prints one JSON line: seconds to the first batch, tokens/s over ``segments`` timed stretches after it,
and the peak resident memory of this process and of it with its children (grain workers), sampled
every 20 ms. ``minimal`` is the plain loop the pipeline is held against: pyarrow record batches of the
text column, the tokenizer's batch encode, eos appended, windows cut with numpy.
"""
from __future__ import annotations

import json
import sys
import threading
import time

import numpy as np


class PeakMemory:
    """Peak RSS of this process alone and with all its descendants, sampled by a thread."""

    def __init__(self, every_s: float = 0.02):
        import psutil
        self.proc, self.every_s = psutil.Process(), every_s
        self.main = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        main = self.proc.memory_info().rss
        total = main
        for child in self.proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except Exception:  # a worker that just ended
                pass
        self.main, self.total = max(self.main, main), max(self.total, total)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.every_s)

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()


def _texts(kind: str, paths: list[str]):
    """Lists of texts: pyarrow record batches of the 'text' column, file after file."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    for path in paths:
        if kind == "parquet":
            for batch in pq.ParquetFile(path).iter_batches(batch_size=256, columns=["text"]):
                yield batch.column(0).to_pylist()
        else:
            for batch in pj.open_json(path, read_options=pj.ReadOptions(block_size=1 << 20)):
                yield batch.column("text").to_pylist()


def minimal_batches(kind: str, paths: list[str], tok, rows: int, seq_len: int):
    """The plain loop: batches int32[rows, seq_len + 1] of windows (stride seq_len) of the files' tokens."""
    eos = np.array([tok.eos_id], np.int32)
    need, buf = rows * seq_len + 1, np.zeros(0, np.int32)
    while True:
        for texts in _texts(kind, paths):
            ids = tok.encode_many(texts)
            buf = np.concatenate([buf] + [x for i in ids for x in (np.asarray(i, np.int32), eos)])
            while len(buf) >= need:
                flat, buf = buf[:need], buf[need - 1:]
                yield np.lib.stride_tricks.sliding_window_view(flat, seq_len + 1)[::seq_len]


def _stream(spec: dict, tok):
    import ml_collections

    from edge_jax.data import make_train_iter
    cfg = ml_collections.ConfigDict(dict(
        name=spec["name"], tokenizer=spec["tokenizer"], seq_len=spec["seq_len"], batch_size=spec["rows"],
        data_dir=spec["data_dir"], text_key="text", facts_entities=2000, longctx_length=4096,
        longctx_examples=200, stream="on", workers=spec["workers"], shuffle_windows=64, tokens_dir=""))
    return make_train_iter(cfg, tok, seed=0)


def measure(spec: dict) -> dict:
    import glob

    from edge_jax.data import get_tokenizer
    memory = PeakMemory()
    t0 = time.perf_counter()
    tok = get_tokenizer(spec["tokenizer"], spec["name"], spec["data_dir"])
    kind, _, pattern = spec["name"].partition(":")
    it = (_stream(spec, tok) if spec["mode"] == "stream"
          else minimal_batches(kind, sorted(glob.glob(pattern)), tok, spec["rows"], spec["seq_len"]))
    next(it)
    first = time.perf_counter() - t0
    per_batch = spec["rows"] * spec["seq_len"]
    batches = max(1, spec["tokens"] // per_batch // spec["segments"])
    rates = []
    for _ in range(spec["segments"]):
        t = time.perf_counter()
        for _ in range(batches):
            next(it)
        rates.append(batches * per_batch / (time.perf_counter() - t))
    memory.stop()
    if hasattr(it, "close"):
        it.close()
    return {"first_batch_s": first, "rates": rates, "tokens_per_s": float(np.median(rates)),
            "peak_main_mb": memory.main / 2**20, "peak_total_mb": memory.total / 2**20,
            "tokens": batches * per_batch * spec["segments"]}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))), flush=True)
