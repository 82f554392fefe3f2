"""NVIDIA cards as compile targets without a GPU (edge_jax.compile.gpus): names, the card facts the
CUDA plugin is given, a tiny train step compiled for an H100, the fit search's scaled accumulation,
and keeping the plugin quiet in commands that compile for no GPU."""
import dataclasses
import os
import subprocess
import sys

import pytest
from helpers import needs_extra

from edge_jax.compile import aot, fit, gpus
from edge_jax.compile.chips import Chip, Target, make_target
from edge_jax.compile.command import report
from edge_jax.compile.report import estimate
from edge_jax.config import ConfigError


def needs_plugin(test):
    """A test of the CUDA plugin's deviceless cards (the ``cuda`` extra), marked ``gpu_compile``."""
    return pytest.mark.gpu_compile(needs_extra("jax_plugins.xla_cuda12")(test))


def test_names():
    assert gpus.parse("h100") == (1, "h100") and gpus.parse("8xh200") == (8, "h200")
    assert gpus.parse("a100") == (1, "a100")
    assert gpus.parse("h800") is None and gpus.parse("0xh100") is None and gpus.parse("v5e-8") is None


def test_target_config_states_the_card():
    text = gpus.target_config(gpus.CARDS["h100"])
    for field in ('name: "NVIDIA H100 80GB HBM3"', "core_count: 132", "shared_memory_per_block_optin: 232448",
                  "cuda_compute_capability { major: 9 minor: 0 }", f"device_memory_size: {81559 * 2 ** 20}"):
        assert field in text, field
    assert "major: 8 minor: 0" in gpus.target_config(gpus.CARDS["a100"])


def test_slices_are_for_tpus_only():
    with pytest.raises(ConfigError, match="--slices applies to TPU topologies only"):
        make_target("h100", slices=2)


@needs_plugin
def test_cards_from_the_plugin():
    for name, n, kind in (("h100", 1, "NVIDIA H100 80GB HBM3"), ("h200", 1, "NVIDIA H200"), ("4xa100", 4,
                                                                                              "NVIDIA A100-SXM4-80GB")):
        target = make_target(name)
        assert len(target.devices) == n and target.devices[0].device_kind == kind
        assert target.chip.platform == "gpu"


@needs_plugin
def test_a_train_step_compiles_for_an_h100(tiny_config):
    config = tiny_config(**{"model.vocab_size": 256})
    target = make_target("h100")
    stats = aot.compile_train(config, target)
    assert stats.flops == 0 and stats.total_bytes > stats.state_bytes > 0   # no cost analysis on GPU
    est = estimate(stats, target)
    assert est.mfu is None and est.compute_s == pytest.approx(stats.model_flops / 989.4e12)
    text, fits = report(config, target)
    assert fits and "est. MFU" in text and "n/a (no compiled FLOPs)" in text and "a lower bound" in text


def _stats(total, temp):
    return aot.CompileStats(step="train", mesh={}, batch=64, seq=8, grad_accum=1, remat="full", state_bytes=0,
                            param_bytes=0, argument_bytes=total - temp, output_bytes=0, alias_bytes=0,
                            temp_bytes=temp, code_bytes=0, flops=0.0, bytes_accessed=0.0, model_flops=1.0, tokens=1,
                            compile_s=0.0)


def test_scaled_accumulation_follows_the_temporaries(tiny_config):
    config = tiny_config(**{"data.batch_size": 64})
    card = Chip("card", 100.0, 1.0, 1.0, 1, 1, platform="gpu")
    target = Target("card", (), card)
    # 20 bytes that do not scale, 500 that do: 80 bytes of room need temporaries / 8
    assert fit.scaled_accumulation(config, {}, _stats(520, 500), target) == 8
    assert fit.scaled_accumulation(config, {"train.grad_accum": 8}, _stats(120, 100), target) == 16
    assert fit.scaled_accumulation(config, {"train.grad_accum": 64}, _stats(120, 100), target) is None
    assert fit.scaled_accumulation(config, {"train.grad_accum": 4}, fit.OutOfMemory(0.0, 0.0, "no bytes"), target) == 8
    assert fit.scaled_accumulation(config, {}, _stats(110, 20), target) == 2
    assert fit.scaled_accumulation(config, {}, _stats(120, 10), target) is None     # 110 that do not scale
    # PLM's paper batch, 3662 = 2 x 1831: the accumulation must divide it, not be a power of two
    plm = tiny_config(**{"data.batch_size": 3662})
    assert fit.scaled_accumulation(plm, {"train.grad_accum": 2}, _stats(5020, 5000), target) == 1831
    no_bytes = fit.OutOfMemory(0.0, 0.0, "no bytes")
    assert fit.scaled_accumulation(config, {"train.grad_accum": 64}, no_bytes, target) is None


def test_a_kernel_past_the_cards_launch_limit_is_a_step_too_large():
    message = ("INTERNAL: RET_CHECK failure (external/xla/xla/backends/gpu/codegen/fusion_emitter.cc:121) ... Kernel "
               "'input_transpose_fusion_8' launch needs more blocks (7679770624, 1) than allowed by hardware "
               "(2147483647, 65535).")
    oom = fit.parse_oom(message)
    assert oom is not None and oom.needed == 0 and oom.message.startswith("Kernel 'input_transpose_fusion_8'")
    assert fit.parse_oom("INTERNAL: something else") is None


@needs_plugin
def test_commands_that_compile_for_no_gpu_keep_the_plugin_quiet():
    code = ("import os, sys; os.environ['JAX_PLATFORMS'] = 'cpu'; from edge_jax.compile import gpus; "
            "gpus.hide_plugin_unless_needed(sys.argv[1]); import jax; print(jax.devices()[0].platform)")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    quiet = subprocess.run([sys.executable, "-c", code, "v5e-8"], capture_output=True, text=True, env=env)
    loud = subprocess.run([sys.executable, "-c", code, "h100"], capture_output=True, text=True, env=env)
    assert quiet.stdout.strip() == loud.stdout.strip() == "cpu"
    assert quiet.stderr == "", quiet.stderr
    assert "cuda" in loud.stderr.lower()     # what the stand-in keeps out: the plugin looking for a driver


def test_a_row_says_when_the_state_alone_fills_the_card(tiny_config):
    from edge_jax.grid.compile_table import _row
    gib = 2 ** 30
    target = Target("card", ("one device",), Chip("card", 80.0 * gib, 1.0, 1.0, 1, 1, platform="gpu"))
    stats = dataclasses.replace(_stats(int(500 * gib), int(410 * gib)), flops=1.0)
    row = _row("big", tiny_config(), target, fit.Outcome(stats, None, False))
    assert row["fits"] == "no: 420.00 GiB over; no candidate fix fits (what no micro-batch changes, the state and " \
                          "program, is 90.00 GiB)"
    small = _row("small", tiny_config(), target, fit.Outcome(_stats(int(100 * gib), int(30 * gib)), None, False))
    assert small["fits"] == "no: 20.00 GiB over; no candidate fix fits"
