"""``edge-jax bench kernels``: on CPU every registered kernel runs interpreted at small shapes and is
checked against its reference; a timed row (as on an accelerator) prints ratio and rates."""
import jax
import jax.numpy as jnp
import pytest
from helpers import requires_gpu

from edge_jax.bench import kernels as kb
from edge_jax.cli import main


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU's run (interpreted, checked only); a GPU "
                    "compiles and times the kernels: the test below")
def test_bench_kernels_checks_every_registered_kernel_on_cpu(capsys):
    assert main(["bench", "kernels", "--kernel", "mla_decode", "--kernel", "expert_ffn"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| mla_decode") or line.startswith("| expert_ffn")]
    assert len(rows) == 8 and not any("FAIL" in r for r in rows)  # 2 cases x the TPU and the GPU variant
    assert sum("(gpu variant)" in r for r in rows) == 4
    assert "only their agreement with the XLA reference is shown" in out
    assert {"expert_ffn", "mla_decode", "segment_attention"} <= set(kb.KERNEL_CASES.names())


def test_a_disagreeing_kernel_is_reported():
    x = jnp.arange(1.0, 9.0)
    case = kb.KernelCase("doubles", lambda a: 2 * a, lambda a: a, (x,), flops=8, bytes=32, dtype="float32")
    row = kb.measure(case, "not_a_kernel", repeats=1)
    assert not row["ok"] and row["rel_error"] > 0.9
    assert "FAIL" in kb.format_rows([row])


def test_each_timed_sample_queues_calls(monkeypatch):
    """The timed path (as on an accelerator): the check, a warm-up run and every round run ``calls`` calls of
    each side."""
    ran = {"kernel": 0, "xla": 0}

    def counted(side):
        def f(a):
            jax.debug.callback(lambda: ran.__setitem__(side, ran[side] + 1))
            return 2.0 * a
        return f

    monkeypatch.setattr(kb.backend, "interpret", lambda name: False)
    x = jax.random.normal(jax.random.key(0), (64,))
    case = kb.KernelCase("x", counted("kernel"), counted("xla"), (x,), flops=64, bytes=256,
                         dtype="float32")
    row = kb.measure(case, "not_a_kernel", repeats=2, calls=3)
    jax.effects_barrier()
    assert ran == {"kernel": 1 + 3 + 2 * 3, "xla": 1 + 3 + 2 * 3}  # the check, the warm-up, 2 rounds of 3
    assert row["ok"] and row["kernel_ms"] > 0 and row["xla_ms"] > 0
    assert row["speedup"] == pytest.approx(row["xla_ms"] / row["kernel_ms"])


def test_timed_rows_print_ratio_and_rates():
    row = {"kernel": "k", "case": "c", "dtype": "bfloat16", "rel_error": 1e-3, "tolerance": 3e-2, "ok": True,
           "kernel_ms": 2.0, "kernel_spread_ms": 0.2, "xla_ms": 3.0, "xla_spread_ms": 0.4, "speedup": 1.5,
           "tflops": 10.0, "gbps": 500.0, "flops_of_peak": 0.01, "bytes_of_peak": 0.15}
    text = kb.format_rows([row])
    assert "| 3.000 ± 0.200 | 2.000 ± 0.100 | 1.50x | 10.0 | 500 | 1%, 15% |" in text


def test_an_unknown_kernel_is_one_line(capsys):
    assert main(["bench", "kernels", "--kernel", "mla_decod"]) == 2
    assert "unknown --kernel value 'mla_decod'; did you mean 'mla_decode'?" in capsys.readouterr().err


@requires_gpu
def test_bench_kernels_on_a_gpu_checks_and_times_every_kernel(capsys):
    assert main(["bench", "kernels", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    names = tuple(f"| {name} |" for name in kb.KERNEL_CASES.names())
    rows = [line for line in out.splitlines() if line.startswith(names)]
    assert rows and not any("FAIL" in r or "interpreted" in r for r in rows)
