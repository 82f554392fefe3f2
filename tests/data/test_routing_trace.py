"""edge_jax.data.routing_trace: the routing-trace file round-trips, and every broken file gives a clear error."""
import dataclasses
import itertools
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edge_jax.data.routing_trace import (
    FORMAT_VERSION,
    RoutingTrace,
    TraceError,
    read_trace,
    write_trace,
)
from edge_jax.papers.expert_cache.synthetic import synthetic_routing


def _trace(**kw):
    args = {"n_tokens": 300, "n_layers": 3, "n_experts": 16, "top_k": 4, "seed": 7, "vocab": 50, "d_embed": 8}
    args.update(kw)
    if args["d_embed"] == 0:   # a trace recorded without the embedding table
        return dataclasses.replace(synthetic_routing(**{**args, "d_embed": 8}), embeddings=None)
    return synthetic_routing(**args)


def _replace(trace, **changes):
    fields = {f: getattr(trace, f) for f in RoutingTrace.__dataclass_fields__}
    return RoutingTrace(**{**fields, **changes})


def _rewrite(src, dst, edit):
    """Copy the npz at `src` to `dst`, passing the header dict and arrays through `edit`."""
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    edit(header, arrays)
    np.savez(dst, header=np.array(json.dumps(header)), **arrays)


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_keeps_every_field(tmp_path, compress):
    rng = np.random.default_rng(0)
    t = _replace(_trace(), layers=(1, 3, 5), meta={"workdir": "runs/x", "split": "val", "n": 3},
                 tokens=rng.integers(1, 50, 300, dtype=np.int32),
                 embeddings=rng.uniform(0.5, 2.0, (50, 8)).astype(np.float32))
    assert np.all(t.probs > 0)  # random, never-zero data: a zero-filled read could not pass
    path = write_trace(tmp_path / "t.npz", t, compress=compress)
    r = read_trace(path)
    for name in ("tokens", "seq_starts", "experts", "probs", "embeddings"):
        a, b = getattr(t, name), getattr(r, name)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), name
    assert (r.layers, r.n_experts, r.top_k, r.meta) == ((1, 3, 5), 16, 4, t.meta)
    assert (r.n_tokens, r.n_layers) == (300, 3)
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]


def test_plain_numpy_can_read_it(tmp_path):
    write_trace(tmp_path / "t.npz", _trace(d_embed=0))
    with np.load(tmp_path / "t.npz", allow_pickle=False) as z:
        header = json.loads(str(z["header"]))
        assert header["version"] == FORMAT_VERSION and header["top_k"] == 4
        assert z["experts"].dtype == np.int16 and z["experts"].shape == (300, 3, 4)
        assert "embeddings" not in z.files and header["arrays"]["probs"]["shape"] == [300, 3, 4]
    assert read_trace(tmp_path / "t.npz").embeddings is None


def test_truncated_file(tmp_path):
    path = write_trace(tmp_path / "t.npz", _trace())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated") as e:
        read_trace(path)
    assert "\n" not in str(e.value) and "re-record" in str(e.value)


def test_corrupt_payload_fails_checksum_or_crc(tmp_path):
    path = write_trace(tmp_path / "t.npz", _trace())
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("probs.npy")
    data[info.header_offset + 200] ^= 0xFF  # inside the probs payload, past its npy header
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="corrupt"):
        read_trace(path)


def test_other_version(tmp_path):
    src = write_trace(tmp_path / "t.npz", _trace())
    _rewrite(src, tmp_path / "v2.npz", lambda h, a: h.update(version=2))
    with pytest.raises(TraceError, match="version 2, this edge_jax reads version 1"):
        read_trace(tmp_path / "v2.npz")


def test_header_array_mismatch(tmp_path):
    src = write_trace(tmp_path / "t.npz", _trace())

    def shape(h, a):
        a["tokens"] = a["tokens"][:-1]

    def values(h, a):
        a["probs"] = a["probs"] * 0.5

    def missing(h, a):
        del a["embeddings"]

    for edit, msg in [(shape, "header says"), (values, "sha256"), (missing, "header lists")]:
        _rewrite(src, tmp_path / "bad.npz", edit)
        with pytest.raises(TraceError, match=msg):
            read_trace(tmp_path / "bad.npz")


def test_validate_rejects_bad_traces():
    t = _trace()
    bad_ids = t.experts.copy()
    bad_ids[5, 1, 2] = 16
    dup = t.experts.copy()
    dup[0, 0, 1] = dup[0, 0, 0]
    cases = [
        ({"experts": bad_ids}, r"expert ids must lie in \[0, 16\)"),
        ({"experts": dup}, "same expert twice"),
        ({"experts": t.experts.astype(np.int32)}, "int16"),
        ({"top_k": 3}, "expected"),
        ({"layers": (0, 1)}, "expected"),
        ({"probs": np.where(t.probs > 0, np.nan, 0).astype(np.float32)}, "finite"),
        ({"probs": t.probs[..., ::-1].copy()}, "non-increasing"),
        ({"seq_starts": np.array([1, 10], np.int64)}, "seq_starts"),
        ({"seq_starts": np.array([0, 10, 10], np.int64)}, "seq_starts"),
        ({"seq_starts": np.array([0, 300], np.int64)}, "seq_starts"),
        ({"tokens": np.full(300, 50, np.int32)}, "embedding table"),
        ({"meta": {"x": object()}}, "JSON"),
    ]
    for change, msg in cases:
        with pytest.raises(TraceError, match=msg):
            _replace(t, **change).validate()


def test_write_validates_first(tmp_path):
    bad = _replace(_trace(), top_k=2)
    with pytest.raises(TraceError):
        write_trace(tmp_path / "t.npz", bad)
    assert list(tmp_path.iterdir()) == []


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(TraceError, match="not found; record one with `edge-jax moe trace"):
        read_trace(tmp_path / "nope.npz")
    with pytest.raises(TraceError, match="directory"):
        read_trace(tmp_path)


def test_sequences_boundaries():
    t = _replace(_trace(n_tokens=10), seq_starts=np.array([0, 3, 4], np.int64))
    assert list(t.validate().sequences()) == [(0, 3), (3, 4), (4, 10)]
    one = _replace(t, seq_starts=np.array([0], np.int64))
    assert list(one.sequences()) == [(0, 10)]
    s = _trace(n_tokens=1000, n_seqs=7)
    bounds = list(s.sequences())
    assert len(bounds) == 7 and bounds[0][0] == 0 and bounds[-1][1] == 1000
    assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in itertools.pairwise(bounds))


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_without_probs(tmp_path, compress):
    t = _trace()
    bare = dataclasses.replace(t, probs=None).validate()
    path = write_trace(tmp_path / "t.npz", bare, compress=compress)
    with np.load(path, allow_pickle=False) as z:   # plain numpy: no probs array, nor a header entry for it
        assert "probs" not in z.files and "probs" not in json.loads(str(z["header"]))["arrays"]
        assert np.array_equal(z["experts"], t.experts)
    r = read_trace(path)
    assert r.probs is None
    for name in ("tokens", "seq_starts", "experts", "embeddings"):
        assert np.array_equal(getattr(r, name), getattr(t, name)), name
    assert path.stat().st_size < write_trace(tmp_path / "full.npz", t, compress=compress).stat().st_size


def test_probs_needed_but_left_out_is_one_line_error():
    t = _trace()
    assert t.router_probs("the EWMA predictor") is t.probs
    with pytest.raises(TraceError, match=r"the EWMA predictor needs router probabilities.*--no-probs") as e:
        dataclasses.replace(t, probs=None).router_probs("the EWMA predictor")
    assert "\n" not in str(e.value)


def test_left_out_probs_still_checked_when_present():
    t = _trace()
    with pytest.raises(TraceError, match="probs has shape"):
        _replace(t, probs=t.probs[:, :, :2].copy()).validate()
    with pytest.raises(TraceError, match="float32"):
        _replace(t, probs=t.probs.astype(np.float64)).validate()


def test_required_array_missing_from_file_and_header(tmp_path):
    src = write_trace(tmp_path / "t.npz", _trace())

    def drop_experts(h, a):
        del a["experts"], h["arrays"]["experts"]

    _rewrite(src, tmp_path / "bad.npz", drop_experts)
    with pytest.raises(TraceError, match=r"lacks the required array\(s\) \['experts'\]"):
        read_trace(tmp_path / "bad.npz")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_committed_traces_read_as_stored(seed):
    """The committed traces (written before probs could be left out) read array for array as numpy loads them."""
    path = Path(__file__).parents[2] / "results" / "npumoe_traces" / f"seed{seed}" / "pystdlib_validation.npz"
    t = read_trace(path)
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == ["embeddings", "experts", "header", "probs", "seq_starts", "tokens"]
        for name in ("tokens", "seq_starts", "experts", "probs", "embeddings"):
            a = getattr(t, name)
            assert a.dtype == z[name].dtype and np.array_equal(a, z[name]), name
    assert (t.n_tokens, t.n_layers, t.top_k, t.n_experts) == (65536, 4, 2, 16)
