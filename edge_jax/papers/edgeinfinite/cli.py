"""EdgeInfinite on the command line: ``edge-jax bench long-context`` (its flags and defaults; what it measures
is :mod:`edge_jax.papers.edgeinfinite.bench`). Imports no JAX (:func:`edge_jax.plugins.load_cli`)."""
from __future__ import annotations

from edge_jax.bench import Benchmark
from edge_jax.registry import BENCHMARKS
from edge_jax.utils.args import at_least, count

DEFAULT_LENGTHS = "2048,4096,8192,16384,32768,65536"
DEFAULT_SINK, DEFAULT_WINDOW, DEFAULT_SEGMENT = 300, 200, 2048  # EdgeInfinite §4.1
DEFAULT_CHUNK = 2048
DEFAULT_REPEATS = 1


def _bench_arguments(group) -> None:
    group.add_argument("--lengths", default=DEFAULT_LENGTHS, help="comma-separated input lengths")
    group.add_argument("--sink", type=at_least(0), default=DEFAULT_SINK, help="EdgeInfinite sink tokens")
    group.add_argument("--window", type=at_least(0), default=DEFAULT_WINDOW,
                       help="EdgeInfinite window tokens (<= --segment)")
    group.add_argument("--segment", type=count, default=DEFAULT_SEGMENT, help="EdgeInfinite segment length")
    group.add_argument("--max-fullkv-length", type=count, default=None, help="skip FullKV above this length "
                       "(default: run it at every length; its cost is quadratic)")
    group.add_argument("--plot", default=None, help="write a two-panel PNG (TTFT, peak memory vs length) here")


BENCHMARKS.register("long-context", Benchmark(
    help="EdgeInfinite Fig. 3: TTFT and peak memory vs input length, EdgeInfinite vs FullKV. Also takes "
         "--d-model, --layers, --heads, --kv-heads, --head-dim, --d-ff, --vocab, --batch, --dtype, --repeats "
         "(default 1), --chunk (FullKV prefill chunk, default 2048), --json; default shape: d_model 128, 2 layers, "
         "4/2 heads x 32, d_ff 256, vocab 256",
    run="edge_jax.papers.edgeinfinite.bench:run", add_arguments=_bench_arguments,
    defaults={"repeats": DEFAULT_REPEATS, "chunk": DEFAULT_CHUNK}, writes_json=True))
