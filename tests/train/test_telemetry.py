"""Seeing what a step does (edge_jax.train.telemetry, .flops): a profiler trace of a window of steps, the
compiled step's memory per device, and model TFLOP/s and MFU per step."""
import glob
import gzip
import json
import os

import jax
import jax.numpy as jnp
import pytest

from edge_jax.config import ConfigError, load_config
from edge_jax.train import telemetry
from edge_jax.train.flops import StepFlops, model_flops, peak_flops
from edge_jax.train.setup import model_config
from edge_jax.train.telemetry import StepProfiler, memory_bytes, profile_dir, record_memory

SPEC = "configs/lm.py:size=tiny"


def steps(profiler, first, last, fail_at=None):
    """Steps as the training loop runs them: each a jitted update, marked and then handed to step_done."""
    step_fn = jax.jit(lambda x: jnp.tanh(x @ x))
    x = jnp.ones((32, 32)) / 32
    for step in range(first, last + 1):
        with profiler.step(step):
            x = step_fn(x)
            if step == fail_at:
                raise RuntimeError(f"step {step} failed")
        profiler.step_done(step, x)


def run_steps(profiler, first, last, fail_at=None):
    with profiler:
        steps(profiler, first, last, fail_at)


def traced_steps(directory) -> list[int]:
    """The step numbers of the ``train`` step annotations in the trace(s) under ``directory``."""
    files = glob.glob(os.path.join(directory, "plugins", "profile", "*", "*.trace.json.gz"))
    assert files, f"no trace under {directory}"
    steps = []
    for path in files:
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
        steps += [int(e["args"]["step_num"]) for e in events if e.get("name") == "train"]
    return sorted(steps)


def test_the_trace_holds_the_window_and_nothing_outside_it(tmp_path):
    directory = str(tmp_path / "profile")
    profiler = StepProfiler(directory, start=3, steps=2)
    run_steps(profiler, 1, 7)
    run_dirs = glob.glob(os.path.join(directory, "plugins", "profile", "*"))
    assert len(run_dirs) == 1
    names = os.listdir(run_dirs[0])
    assert any(n.endswith(".xplane.pb") for n in names) and "perfetto_trace.json.gz" in names
    assert traced_steps(directory) == [3, 4] and profiler.traced == [3, 4]
    jax.profiler.start_trace(str(tmp_path / "next"))  # the window's trace was stopped: another may start
    jax.profiler.stop_trace()


def test_no_profile_steps_no_profile_dir(tmp_path):
    run_steps(StepProfiler(str(tmp_path / "profile"), start=1, steps=0), 1, 4)
    assert not os.path.exists(tmp_path / "profile")


def test_a_run_that_fails_in_the_window_still_writes_its_trace(tmp_path):
    directory = str(tmp_path / "profile")
    with pytest.raises(RuntimeError, match="step 4 failed"):
        run_steps(StepProfiler(directory, start=3, steps=5), 1, 9, fail_at=4)
    assert traced_steps(directory) == [3, 4]
    jax.profiler.start_trace(str(tmp_path / "next"))
    jax.profiler.stop_trace()


def test_the_window_ends_at_the_runs_last_step_and_a_resumed_run_traces_what_is_left(tmp_path):
    cut = StepProfiler(str(tmp_path / "cut"), start=3, steps=10, last_step=5)
    with cut:
        steps(cut, 1, 5)
        # written by step_done at the run's last step, not by the exit
        assert glob.glob(str(tmp_path / "cut" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert traced_steps(str(tmp_path / "cut")) == [3, 4, 5]
    resumed = StepProfiler(str(tmp_path / "resumed"), start=3, steps=4)
    run_steps(resumed, 5, 9)  # resumed from step 4's checkpoint
    assert traced_steps(str(tmp_path / "resumed")) == [5, 6]


def test_one_process_traces_into_workdir_profile(tmp_path):
    assert profile_dir(str(tmp_path)) == os.path.join(str(tmp_path), "profile")


def test_memory_of_a_compiled_step_matches_its_arrays(tmp_path, capsys):
    x, y = jnp.ones((64, 64), jnp.float32), jnp.ones((64, 32), jnp.bfloat16)
    step = jax.jit(lambda a, b: (a + 1, (a[:, :32] * b).sum()), donate_argnums=0)
    compiled = step.lower(x, y).compile()
    mem = memory_bytes(compiled)
    assert mem["argument_bytes"] == x.nbytes + y.nbytes
    assert mem["output_bytes"] >= x.nbytes + 4 and mem["alias_bytes"] == x.nbytes  # a + 1 reuses a's buffer
    assert mem["total_bytes"] == (mem["argument_bytes"] + mem["output_bytes"] - mem["alias_bytes"]
                                  + mem["temp_bytes"] + mem["code_bytes"])
    assert record_memory(compiled, str(tmp_path)) == mem
    with open(tmp_path / "memory.json") as f:
        assert json.load(f) == dict(mem, device_kind=jax.local_devices()[0].device_kind)
    line = capsys.readouterr().out.strip()
    assert line.startswith("train step memory per device (cpu): ") and "\n" not in line
    assert "arguments 20.0 KiB" in line and "aliased 16.0 KiB" in line


class NoAnalysis:
    def __init__(self, error=None):
        self.error = error

    def memory_analysis(self):
        if self.error:
            raise self.error
        return None


@pytest.mark.parametrize("compiled", [NoAnalysis(), NoAnalysis(NotImplementedError("no memory stats"))])
def test_a_backend_without_memory_analysis_gives_none_and_says_so(compiled, tmp_path, capsys):
    assert memory_bytes(compiled) is None
    assert record_memory(compiled, str(tmp_path)) is None
    assert capsys.readouterr().out.strip().endswith("the compiler gives no memory analysis on this backend")
    assert not os.path.exists(tmp_path / "memory.json")


def test_the_compile_command_reports_the_same_memory():
    from edge_jax.compile import aot
    assert aot.memory_bytes is telemetry.memory_bytes and aot.model_flops is model_flops


def tiny_model(**overrides):
    config = load_config(SPEC, {"model.vocab_size": 256, "model.n_layers": 2, "model.d_model": 64,
                                "model.n_heads": 4, "model.n_kv_heads": 2, "model.head_dim": 16, "model.d_ff": 96,
                                "data.seq_len": 32, "data.batch_size": 8, **overrides})
    return config, model_config(config)


def test_model_flops_counts_6_n_t_and_attention():
    config, cfg = tiny_model()
    d, h, kv, k, ff, v, layers, t = 64, 4, 2, 16, 96, 256, 2, 32
    n = v * d + layers * (d * h * k + 2 * d * kv * k + h * k * d + 3 * d * ff)  # tied embedding, SwiGLU
    assert model_flops(cfg, 8 * t, t) == pytest.approx((6 * n + 12 * layers * h * k * t) * 8 * t)
    assert model_flops(cfg, 8 * t, t, train=False) == pytest.approx(model_flops(cfg, 8 * t, t) / 3)


def test_step_flops_per_device_and_mfu_only_where_the_peak_is_known():
    config, cfg = tiny_model(**{"model.dtype": "bfloat16"})
    flops = model_flops(cfg, 8 * 32, 32)
    on_tpu = StepFlops(cfg, config, 4, "TPU v5 lite").metrics(0.25)
    assert on_tpu["tflops_per_device"] == pytest.approx(flops / 0.25 / 4 / 1e12)
    assert on_tpu["mfu"] == pytest.approx(flops / 0.25 / 4 / 197e12)
    on_cpu = StepFlops(cfg, config, 1, "cpu").metrics(0.25)
    assert set(on_cpu) == {"tflops_per_device"} and on_cpu["tflops_per_device"] == pytest.approx(flops / 0.25 / 1e12)
    assert StepFlops(cfg, config, 4, "TPU v5 lite").metrics(None) == {}


def test_the_peak_follows_the_compute_dtype():
    h100 = "NVIDIA H100 80GB HBM3"
    (c16, cfg16), (c32, cfg32) = tiny_model(**{"model.dtype": "bfloat16"}), tiny_model(**{"model.dtype": "float32"})
    bf16, f32 = StepFlops(cfg16, c16, 8, h100).metrics(1.0), StepFlops(cfg32, c32, 8, h100).metrics(1.0)
    assert f32["mfu"] == pytest.approx(2 * bf16["mfu"])  # a float32 matmul runs in TF32: half the bf16 peak
    assert peak_flops("TPU v5p", "float32") == peak_flops("TPU v5p", "bfloat16")  # one bf16 pass on a TPU
    assert peak_flops("TPU v5") == peak_flops("TPU v5p") and peak_flops("cpu") is None


@pytest.mark.parametrize("overrides,needle", [
    ({"train.profile_steps": -1}, "train.profile_steps=-1 >= 0"),
    ({"train.profile_start": 0, "train.profile_steps": 2}, "train.profile_start=0 must be >= 1"),
    ({"train.steps": 10, "train.warmup_steps": 2, "train.profile_start": 11, "train.profile_steps": 2},
     "train.profile_start=11 is past train.steps=10"),
])
def test_bad_profile_windows_are_refused_in_one_line(overrides, needle):
    with pytest.raises(ConfigError) as e:
        load_config(SPEC, overrides)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_default_is_no_profile():
    c = load_config(SPEC)
    assert c.train.profile_steps == 0 and c.train.profile_start >= 1
