"""The training loop keeps the devices fed: batches placed ahead, metrics read only where needed,
divergence still caught before any checkpoint of a bad step (edge_jax.train.feed, .readback)."""
import contextlib
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import config as jax_config

from edge_jax.train import readback
from edge_jax.train.checkpoint import Checkpointer
from edge_jax.train.feed import DeviceFeed
from edge_jax.train.loop import TrainingError, evaluate, train_and_evaluate
from edge_jax.train.metrics import read_jsonl


@contextlib.contextmanager
def guarded_reads():
    """JAX guards no transfer on the CPU backend (its arrays are host memory already), so here a read
    of an array's value (``float(x)``, ``np.asarray(x)``, ``jax.device_get``) fails wherever the
    device-to-host guard says ``disallow``, as it would on a GPU or TPU. Yields the count of reads
    that were allowed."""
    array_type = type(jnp.zeros(()))
    original = array_type._value
    reads = [0]

    def value(self):
        level = jax_config.transfer_guard_device_to_host.value
        if level in ("disallow", "disallow_explicit"):
            raise RuntimeError(f"device-to-host read of {self.shape} {self.dtype} under transfer guard {level}")
        reads[0] += 1
        return original.fget(self)

    array_type._value = property(value)
    try:
        yield reads
    finally:
        array_type._value = original


def test_the_guard_emulation_catches_a_read():
    x = jnp.arange(3.0) + 1
    with guarded_reads() as reads:
        assert float(x.sum()) == 6.0 and reads[0] == 1
        with readback.steady(), pytest.raises(RuntimeError, match="transfer guard disallow"):
            float(x.sum())


def test_no_read_between_log_steps(tiny_config, tmp_path):
    """Every step outside the loop's read points runs under the guard: a run with reads only at log,
    eval and checkpoint steps finishes; a loop that read a loss at every step would fail."""
    cfg = tiny_config(**{"train.steps": 12, "train.log_every": 5, "train.eval_every": 10, "train.ckpt_every": 10})
    with guarded_reads() as reads:
        result = train_and_evaluate(cfg, str(tmp_path / "run"))
    assert reads[0] > 0 and math.isfinite(result["val_loss"])
    logged = [r["step"] for r in read_jsonl(str(tmp_path / "run" / "metrics.jsonl")) if r["kind"] == "train"]
    assert logged == [5, 10, 12]

    class Eager(readback.Readback):  # the old loop: a step's loss read right after its dispatch
        def add(self, step, metrics):
            float(metrics["loss"])
            super().add(step, metrics)

    with guarded_reads(), pytest.MonkeyPatch.context() as mp:
        mp.setattr("edge_jax.train.loop.Readback", Eager)
        with pytest.raises(RuntimeError, match="transfer guard"):
            train_and_evaluate(cfg, str(tmp_path / "eager"))


def test_divergence_between_reads_saves_no_bad_checkpoint(tiny_config, tmp_path, monkeypatch):
    """Checkpoints every 4 steps, losses logged every 10, the loss non-finite from step 11 on: step 12's
    checkpoint reads its losses first, so 11 is named, no checkpoint at or after it exists, and the
    message names the last healthy one (8)."""
    from edge_jax.train import step as step_module

    def make_train_step(*args, **kwargs):
        inner = loop_make(*args, **kwargs)

        def step(state, batch):
            new, metrics = inner(state, batch)
            return new, dict(metrics, loss=jnp.where(state.step >= 10, jnp.nan, metrics["loss"]))

        return step

    loop_make = step_module.make_train_step
    monkeypatch.setattr(step_module, "make_train_step", make_train_step)
    wd = str(tmp_path / "nan")
    cfg = tiny_config(**{"train.steps": 20, "train.ckpt_every": 4, "train.log_every": 10, "train.eval_every": 1000})
    with pytest.raises(TrainingError, match=r"at step 11; the last healthy checkpoint is step 8 "):
        train_and_evaluate(cfg, wd)
    ckpt = Checkpointer(os.path.join(wd, "checkpoints"), 3, 4)
    try:
        assert ckpt.all_steps() == [4, 8]
        assert all(math.isfinite(ckpt.metrics(s)["loss"]) for s in ckpt.all_steps())
    finally:
        ckpt.close()


class Counting:
    """A data iterator yielding batch i with state {"next": i + 1} (the protocol of edge_jax.data's)."""

    def __init__(self):
        self.i = 0

    def __next__(self):
        self.i += 1
        return {"inputs": np.full((2, 3), self.i - 1, np.int32)}

    def local_state(self):
        return {"next": self.i}

    def global_state(self, local):
        return dict(local, whole=True)


def test_feed_runs_ahead_and_keeps_the_state_of_what_it_handed_out():
    data = Counting()
    feed = DeviceFeed(data, lambda b: {k: jnp.asarray(v) for k, v in b.items()}, depth=2)
    assert feed.data_state() == {"next": 0, "whole": True}
    assert int(feed.peek()["inputs"][0, 0]) == 0 and data.i == 1
    for expected in range(5):
        batch = next(feed)
        feed.fill()
        assert int(batch["inputs"][0, 0]) == expected
        assert data.i == expected + 3  # two batches ahead of the one handed out
        assert feed.data_state() == {"next": expected + 1, "whole": True}


def test_step_clock_reads_to_reads_without_pauses_and_warm_up(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(readback.time, "perf_counter", lambda: now[0])
    clock = readback.StepClock()
    for step in range(1, 12):
        clock.dispatched(step)  # the host runs ahead: dispatches take no time
    now[0] += 30.0 + 2.0  # step 1 pays 30 s of one-time costs, then a step every 2 s
    clock.read(2)
    assert clock.window() == pytest.approx(16.0)  # steps 1-2 since the first dispatch
    now[0] += 2.0
    clock.read(3)  # the first read past the warm-up (WARMUP = 2 steps)
    with clock.paused():
        now[0] += 100.0  # an evaluation
    now[0] += 8 * 2.0
    clock.read(11)  # steps 4-11 read together
    assert clock.window() == pytest.approx(2.0)  # steps 3-11
    assert clock.window() == pytest.approx(2.0)  # another record from the same read
    assert clock.steady() == pytest.approx(2.0)  # from the read of step 3 to that of step 11


def test_eval_sum_on_the_devices_equals_the_batch_by_batch_sum(tiny_config):
    from edge_jax.sharding import batch_sharding, make_mesh, process_rows, to_global

    mesh = make_mesh(tiny_config().mesh, jax.devices()[:1])
    sharding = batch_sharding(mesh)
    rng = np.random.default_rng(0)
    batches = [{"inputs": rng.normal(size=(4, 3)).astype(np.float32) + 1.0} for _ in range(5)]

    def step(params, batch):
        return {"loss_sum": jnp.sum(batch["inputs"] ** 2) * params, "tokens": jnp.float32(batch["inputs"].size)}

    got = evaluate(jax.jit(step), jnp.float32(0.5), batches, sharding)
    loss_sum = sum(float(step(0.5, to_global(process_rows(b, sharding), sharding))["loss_sum"]) for b in batches)
    want = loss_sum / (5 * 12)
    assert got["val_loss"] == pytest.approx(want, rel=1e-6) and got["val_ppl"] == pytest.approx(math.exp(want))


def test_a_run_records_memory_flops_and_a_profile(tiny_config, tmp_path, capsys):
    import glob
    import json

    wd = tmp_path / "run"
    cfg = tiny_config(**{"train.steps": 6, "train.log_every": 2, "train.profile_start": 3, "train.profile_steps": 2})
    result = train_and_evaluate(cfg, str(wd))
    assert glob.glob(str(wd / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    memory = json.loads((wd / "memory.json").read_text())
    assert memory["argument_bytes"] > 0 and memory["total_bytes"] >= memory["argument_bytes"]
    assert "train step memory per device" in capsys.readouterr().out
    records = [r for r in read_jsonl(str(wd / "metrics.jsonl")) if r["kind"] == "train"]
    assert [r["step"] for r in records] == [2, 4, 6]
    for r in records:  # CPU: TFLOP/s, no MFU (no known peak)
        assert r["tflops_per_device"] > 0 and "mfu" not in r
        assert r["tokens_per_s"] == pytest.approx(8 * 32 / r["step_time_s"])
    assert result["step_time_s"] > 0 and "tflops_per_device" not in result  # records keep one timing pair
