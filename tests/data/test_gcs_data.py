"""Corpora and prepared token shards in a bucket (``gs://``), against a local Cloud Storage server
(tests/gcs.py): each read from the bucket equals the same read of a local copy."""
import json
import os
import random
import string

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import needs_extra

pytestmark = needs_extra("gcsfs")


@pytest.fixture(scope="module")
def bucket():
    from gcs import emulator
    with emulator() as root:
        yield root


def _texts(n, seed):
    rng = random.Random(seed)
    return [" ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 8)))
                     for _ in range(rng.randint(20, 120))) for _ in range(n)]


def _corpus(local, remote: str) -> tuple[str, str]:
    """Three parquet files (row groups of 40) written locally and uploaded: the two ``parquet:`` names."""
    from edge_jax.utils.storage import epath
    local.mkdir(parents=True)
    for i in range(3):
        path = local / "data" / f"part{i}.parquet"
        path.parent.mkdir(exist_ok=True)
        pq.write_table(pa.table({"text": _texts(160, i)}), path, row_group_size=40)
        epath(f"{remote}/data/part{i}.parquet").write_bytes(path.read_bytes())
    return f"parquet:{local}/data/*.parquet", f"parquet:{remote}/data/*.parquet"


def _losses(workdir) -> dict:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"}


def test_a_bucket_glob_reads_the_documents_of_its_local_copy(bucket, tmp_path):
    from edge_jax.data import resolve
    from edge_jax.data.file_sources import _glob
    local, remote = _corpus(tmp_path / "c", f"{bucket}/docs")
    assert [p.name for p in _glob(remote.split(":", 1)[1])] == ["part0.parquet", "part1.parquet", "part2.parquet"]
    for split in ("train", "validation"):
        want = resolve(local).documents(split)
        assert want and resolve(remote).documents(split) == want, split
    # more readers than files: pieces are runs of row groups, read with ranged requests
    assert len(resolve(remote).pieces("train", 8)) == len(resolve(local).pieces("train", 8)) > 3


def test_training_streams_a_bucket_corpus_as_it_does_a_local_one(bucket, tmp_path, tiny_config):
    from edge_jax.train.loop import train_and_evaluate
    local, remote = _corpus(tmp_path / "c", f"{bucket}/stream")
    run = {"train.steps": 3, "train.eval_every": 3, "train.ckpt_every": 3, "data.workers": 1}
    for name, where in ((local, "local"), (remote, "remote")):
        train_and_evaluate(tiny_config(**run, **{"data.name": name}), str(tmp_path / where))
    want = _losses(tmp_path / "local")
    assert sorted(want) == [1, 2, 3] and _losses(tmp_path / "remote") == want
    tokens = os.path.join(os.environ["EDGE_JAX_DATA"], "tokens")
    assert not os.path.exists(tokens) or not os.listdir(tokens)  # streamed: nothing was prepared


def test_a_published_object_appears_whole_or_not_at_all(bucket):
    """atomic_open on a gs:// path: one object committed when the block ends; a block that raises leaves none."""
    from edge_jax.utils.atomic import atomic_open, write_json_atomic
    from edge_jax.utils.storage import epath
    write_json_atomic(f"{bucket}/pub/record.json", {"loss": 1.5})
    assert json.loads(epath(f"{bucket}/pub/record.json").read_text()) == {"loss": 1.5}
    data = np.random.default_rng(0).integers(0, 255, 300_000, np.uint8).tobytes()
    with atomic_open(f"{bucket}/pub/shard.bin", "wb") as f:
        for at in range(0, len(data), 70_000):
            f.write(data[at:at + 70_000])
            assert not epath(f"{bucket}/pub/shard.bin").exists()  # nothing visible before the end
    assert epath(f"{bucket}/pub/shard.bin").read_bytes() == data
    with pytest.raises(KeyError), atomic_open(f"{bucket}/pub/half.bin", "wb") as f:
        f.write(data)
        raise KeyError("a bad record")
    assert sorted(p.name for p in epath(f"{bucket}/pub").iterdir()) == ["record.json", "shard.bin"]


def test_shards_prepared_into_a_bucket_hold_the_local_tokens_and_train_alike(bucket, tmp_path, tiny_config):
    from edge_jax.cli import main
    from edge_jax.data.shards import TokenShards
    from edge_jax.train.loop import train_and_evaluate
    from edge_jax.utils.storage import epath
    local, _ = _corpus(tmp_path / "c", f"{bucket}/prep")
    dirs = {"local": str(tmp_path / "tokens"), "remote": f"{bucket}/tokens"}
    for where, tokens_dir in dirs.items():
        assert main(["data", "prepare", "--config", "configs/lm.py:size=tiny", f"--config.data.name={local}",
                     f"--config.data.tokens_dir={tokens_dir}"]) == 0, where
    roots = {w: sorted(str(p) for p in epath(d).iterdir()) for w, d in dirs.items()}
    assert len(roots["local"]) == len(roots["remote"]) == 2  # train and validation
    for a, b in zip(roots["local"], roots["remote"]):
        assert os.path.basename(a) == os.path.basename(b)
        assert not [p.name for p in epath(b).iterdir() if p.name.endswith(".tmp")]  # published, no leftovers
        want, got = TokenShards([a]), TokenShards([b])
        assert len(got) == len(want) > 1000
        np.testing.assert_array_equal(got[0:len(got)], want[0:len(want)])
        np.testing.assert_array_equal(got[517:1203], want[517:1203])
    run = {"train.steps": 3, "train.eval_every": 3, "train.ckpt_every": 3, "data.name": local}
    for where, tokens_dir in dirs.items():
        train_and_evaluate(tiny_config(**run, **{"data.tokens_dir": tokens_dir}), str(tmp_path / f"run_{where}"))
    want = _losses(tmp_path / "run_local")
    assert sorted(want) == [1, 2, 3] and _losses(tmp_path / "run_remote") == want


def test_batched_window_reads_from_a_bucket_equal_the_local_shards(bucket, tmp_path):
    from test_shard_reads import write_shards

    from edge_jax.data.shards import TokenShards
    from edge_jax.utils.storage import epath
    local = tmp_path / "shards"
    local.mkdir()
    flat = np.concatenate(write_shards(local, [3000, 11, 5000]))
    for name in os.listdir(local):
        epath(f"{bucket}/batched/{name}").write_bytes((local / name).read_bytes())
    remote, near = TokenShards([f"{bucket}/batched"]), TokenShards([str(local)])
    starts = np.random.default_rng(3).integers(0, len(flat) - 257, 64)
    starts[0] = 2900  # across all three shards
    got = remote.windows(starts, 257)
    np.testing.assert_array_equal(got, near.windows(starts, 257))
    np.testing.assert_array_equal(got, np.stack([remote[s:s + 257] for s in starts]))  # one range at a time
    with pytest.raises(Exception, match="outside the 8011 tokens"):
        remote.windows([8000], 20)
    mixed = TokenShards([str(local), f"{bucket}/batched"])  # a mixture: one part on disk, one in the bucket
    starts = np.concatenate([starts, starts + len(flat) - 257, [len(flat) - 100]])  # both parts, and across
    np.testing.assert_array_equal(mixed.windows(starts, 257), np.stack([mixed[s:s + 257] for s in starts]))
    both = np.concatenate([flat, flat])
    np.testing.assert_array_equal(mixed.windows(starts, 257), both[starts[:, None] + np.arange(257)])


def test_a_routing_trace_in_a_bucket_round_trips_and_a_missing_one_is_one_line(bucket):
    import dataclasses

    from edge_jax.data.routing_trace import TraceError, read_trace, write_trace
    from edge_jax.papers.expert_cache.synthetic import synthetic_routing
    trace = synthetic_routing(n_tokens=200, n_layers=2, n_experts=8, top_k=2, seed=3, vocab=40, d_embed=4)
    path = write_trace(f"{bucket}/traces/t.npz", trace, compress=True)
    assert str(path) == f"{bucket}/traces/t.npz"
    back = read_trace(f"{bucket}/traces/t.npz")
    for field in dataclasses.fields(trace):
        a, b = getattr(trace, field.name), getattr(back, field.name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, field.name
    with pytest.raises(TraceError, match=f"routing trace {bucket}/traces/none.npz not found"):
        read_trace(f"{bucket}/traces/none.npz")
