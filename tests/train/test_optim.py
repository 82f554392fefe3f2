import ml_collections
import numpy as np
import pytest

from edge_jax.train.optim import make_schedule


def sched(kind, **kw):
    t = ml_collections.ConfigDict(dict(steps=1000, warmup_steps=10, lr=1.0, min_lr=0.1, schedule=kind,
                                       decay_fraction=0.2, tail_fraction=0.1))
    t.update(kw)
    s = make_schedule(t)
    return np.array([float(s(i)) for i in range(1000)])


def test_warmup_is_linear_to_peak():
    for kind in ("cosine", "wsd", "wsdc", "constant"):
        lr = sched(kind)
        np.testing.assert_allclose(lr[:10], np.arange(1, 11) / 10, rtol=1e-6)


def test_cosine_reaches_min_lr():
    lr = sched("cosine")
    assert lr[10] == pytest.approx(1.0) and lr[-1] == pytest.approx(0.1, abs=1e-4)
    assert np.all(np.diff(lr[10:]) <= 1e-7)


def test_wsd_stable_then_linear_decay():
    lr = sched("wsd")
    assert np.all(lr[10:800] == 1.0)
    assert lr[-1] == pytest.approx(0.1, abs=5e-3) and lr[900] == pytest.approx(0.55, abs=1e-2)


def test_wsdc_has_constant_tail():
    lr = sched("wsdc")
    assert np.all(lr[10:700] == 1.0)  # stable until decay begins at 1000 - 100 - 200
    assert lr[800] == pytest.approx(0.55, abs=1e-2)
    np.testing.assert_allclose(lr[900:], 0.1, rtol=1e-6)  # constant tail, last 10%
