"""NPUMoE's ``bench kernels`` cases of the expert FFN (edge_jax.papers.npumoe.kernel_cases): the fill counts by
hand, the full-size table against the paper's shapes (PhiMoE, a 512-token chunk, Table 5's tiers and groups;
recorded, not allocated), and one case's accounting (FLOPs, bytes tile by tile), inputs, and reference against
SwiGLU in numpy on random experts. (The small cases' kernel against their reference: test_expert_ffn.py,
test_small_bench_cases_agree.)"""
import jax.numpy as jnp
import numpy as np
import pytest

from edge_jax.bench.kernels import KERNEL_CASES
from edge_jax.layers.kernels.expert_ffn import expert_ffn
from edge_jax.papers.npumoe import kernel_cases as kc


def test_counts_by_hand():
    assert kc.counts(64, 4, kc.FILLS["65% filled"]).tolist() == [64, 51, 38, 13]  # 51.2, 38.4, 12.8 rounded
    assert kc.counts(128, 4, kc.FILLS["one empty"]).tolist() == [128, 115, 90, 0]  # 115.2, 89.6
    assert kc.counts(64, 8, kc.FILLS["65% filled"]).tolist() == [64, 51, 38, 13] * 2
    assert np.mean(kc.FILLS["65% filled"]) == pytest.approx(0.65)  # the docstring's average fill
    rng = np.random.default_rng(0)
    for _ in range(5):
        cap, group = int(rng.integers(1, 300)), int(rng.integers(1, 12))
        fills = tuple(rng.uniform(0, 1, int(rng.integers(1, 5))))
        got = kc.counts(cap, group, fills)
        assert got.dtype == np.int32 and got.tolist() == [round(cap * fills[i % len(fills)]) for i in range(group)]


def test_the_full_size_cases_take_the_papers_shapes(monkeypatch):
    """PhiMoE's experts (d 4096, d_ff 6400), base capacity 512 * 2 / 16 = 64; tiers 1x/2x/4x in groups of 4,
    1x in a group of 8, and the one-empty fills at 2x."""
    made = []
    monkeypatch.setattr(kc, "case", lambda label, X, Z, D, F, count, dtype, **kw: made.append(
        (label, X, Z, D, F, np.asarray(count).tolist(), dtype, kw)) or label)
    assert KERNEL_CASES.get("expert_ffn") is kc.cases
    labels = kc.cases(False)
    assert len(labels) == len(set(labels)) == 5  # the committed bench results are keyed by label
    want = [(4, 64, "65% filled"), (4, 128, "65% filled"), (4, 256, "65% filled"), (8, 64, "65% filled"),
            (4, 128, "one empty")]
    for (label, X, Z, D, F, count, dtype, kw), (x, z, fills) in zip(made, want):
        assert (X, Z, D, F, dtype, kw) == (x, z, 4096, 6400, "bfloat16", {})
        assert count == kc.counts(z, x, kc.FILLS[fills]).tolist() and f"C {z} ({z // 64}x base)" in label


def test_the_small_cases_fit_the_interpreter(monkeypatch):
    made = []
    monkeypatch.setattr(kc, "case", lambda *a, **kw: made.append((a, kw)) or a[0])
    kc.cases(True)
    assert [(a[1:7], kw["block_c"], kw["block_f"]) for a, kw in made] == [
        ((3, 32, 128, 256, [0, 20, 32], dt), 16, 128) for dt in ("float32", "bfloat16")]


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_one_case_accounts_and_pairs_the_kernel_with_its_reference(dtype, tol):
    """Row tiles of 16 (block_c=16 divides 32 and is a whole sublane tile in both dtypes); the reference output
    against SwiGLU in float64 numpy on the valid rows, zero past them."""
    rng = np.random.default_rng(1)
    X, Z, D, F, bc = 3, 32, 128, 128, 16
    count = [0, int(rng.integers(1, bc)), int(rng.integers(bc + 1, Z))]  # empty, one tile, two tiles (partial)
    c = kc.case("t", X, Z, D, F, count, dtype, seed=int(rng.integers(100)), block_c=bc, block_f=128)
    x, gate, up, down, cnt = c.args
    assert c.dtype == dtype and c.kernel.func is expert_ffn and c.kernel.keywords == {"block_c": bc, "block_f": 128}
    assert x.shape == (X, Z, D) and gate.shape == up.shape == (X, D, F) and down.shape == (X, F, D)
    assert all(a.dtype == jnp.dtype(dtype) for a in (x, gate, up, down)) and cnt.tolist() == count
    for w, fan_in in ((gate, D), (up, D), (down, F)):  # scale 1/sqrt(fan-in)
        assert float(jnp.std(w.astype(jnp.float32))) * np.sqrt(fan_in) == pytest.approx(1.0, rel=0.05)
    size = jnp.dtype(dtype).itemsize
    moved = X * Z * D * size  # the whole output
    for n in count:
        for _ in range(0, n, bc):  # each live row tile reads its expert's three matrices and its rows
            moved += (3 * D * F + bc * D) * size
    assert c.bytes == moved and c.flops == 2 * 3 * sum(count) * D * F
    x64, g64, u64, d64 = (np.asarray(a, np.float64) for a in (x, gate, up, down))
    got = np.asarray(c.reference(*c.args), np.float64)
    for e, n in enumerate(count):
        a, b = x64[e] @ g64[e], x64[e] @ u64[e]
        want = (a / (1 + np.exp(-a)) * b) @ d64[e]
        assert not got[e, n:].any()
        if n:
            assert np.linalg.norm(got[e, :n] - want[:n]) / np.linalg.norm(want[:n]) < tol
