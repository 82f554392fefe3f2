"""edge-jax compile: targets, meshes, the compiled step's figures, the roofline, OOM parsing, and
the grid's compile table. TPU compiles need libtpu (the tpu extra, which CI installs); they use
a 4-chip slice and tiny models so each takes seconds."""
import dataclasses
import re

import jax
import pytest
from helpers import needs_extra

from edge_jax.compile import aot, fit
from edge_jax.compile.chips import CHIPS, Target, make_target, slice_shape
from edge_jax.compile.command import parse_mesh
from edge_jax.compile.report import estimate
from edge_jax.config import ConfigError


@pytest.mark.parametrize("name,want", [("v5p-128", ("v5p", "4x4x4")), ("v5e-256", ("v5e", "16x16")),
                                       ("v4-8", ("v4", "2x2x1")), ("v6e-16", ("v6e", "4x4")),
                                       ("v5p:2x2x2", ("v5p", "2x2x2"))])
def test_cloud_names_map_to_slice_shapes(name, want):
    assert slice_shape(name) == want


@pytest.mark.parametrize("name,message", [("v9-8", "unknown topology 'v9-8'"), ("v5p-100", "v5p slices are"),
                                          ("tpu", "unknown topology"), ("v5e:4x4x4", "v5e slices are")])
def test_bad_topologies_name_the_valid_ones(name, message):
    with pytest.raises(ConfigError, match=message) as e:
        slice_shape(name)
    assert "\n" not in str(e.value)


def test_mesh_flag():
    assert parse_mesh(None, 2) == {"data": 2, "fsdp": -1, "tensor": 1}
    assert parse_mesh("fsdp=64,tensor=2", 1) == {"data": 1, "fsdp": 64, "tensor": 2}
    with pytest.raises(ConfigError, match="AXIS=SIZE"):
        parse_mesh("model=4", 1)


def _cpu(n=8):
    return Target(f"cpu:{n}", tuple(jax.devices("cpu")[:n]), None)


def test_a_mesh_must_use_every_device():
    with pytest.raises(ConfigError, match="does not use the 8 devices of cpu:8; make data\\*fsdp\\*tensor = 8"):
        aot.mesh_for(_cpu(), {"data": 2, "fsdp": 2, "tensor": 1})
    assert dict(aot.mesh_for(_cpu(), {"data": 1, "fsdp": -1, "tensor": 2}).shape) == {"data": 1, "fsdp": 4,
                                                                                     "tensor": 2}


def _config(tiny_config, **extra):
    return tiny_config(**{"model.vocab_size": 256, "mesh.data": 1, "mesh.fsdp": -1, "mesh.tensor": 1, **extra})


def test_an_axis_that_does_not_divide_a_dimension_is_named(tiny_config):
    c = _config(tiny_config, **{"mesh.fsdp": 1, "mesh.tensor": 8})
    with pytest.raises(ConfigError, match="model.n_heads=4 is not divisible by mesh.tensor=8"):
        aot.compile_train(c, _cpu())


def test_cpu_compile_of_the_train_step(tiny_config):
    """The compiled step holds the sharded train state, and its FLOPs are close to the model count
    (6 N T + attention; no remat, so the compiler adds only softmax, norms and the optimizer)."""
    c = _config(tiny_config)
    stats = aot.compile_train(c, _cpu())
    assert stats.mesh == {"data": 1, "fsdp": 8, "tensor": 1} and stats.tokens == 8 * 32
    assert 0 < stats.param_bytes < stats.state_bytes <= stats.argument_bytes
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(jax.eval_shape(
        lambda: aot.abstract_train_state(aot.DecoderLM(aot.model_config(c)),
                                         aot.make_optimizer(c.train)[0], aot.mesh_for(_cpu(), c.mesh))[0].params)))
    assert stats.param_bytes * 8 >= 4 * n_params  # fsdp splits them at most 8 ways
    total = stats.flops * 8
    assert 0.7 * stats.model_flops < total < 2.0 * stats.model_flops, (total, stats.model_flops)
    assert estimate(stats, _cpu()) is None  # no chip, no roofline


def test_cpu_compile_of_the_decode_step(tiny_config):
    stats = aot.compile_decode(_config(tiny_config), _cpu(), batch=8, max_len=64)
    assert stats.step == "decode" and stats.flops > 0 and stats.tokens == 8


def test_vocabulary_must_be_fixed(tiny_config):
    with pytest.raises(ConfigError, match="model.vocab_size is 0"):
        aot.compile_train(tiny_config(**{"mesh.data": 1}), _cpu())


@pytest.mark.parametrize("message,needed,available", [
    ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (96.97G) "
     "exceeds available HBM (15.75G).", 96.97 * 2 ** 30, 15.75 * 2 ** 30),
    ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 20.5G of "
     "15.48G hbm. Exceeded hbm capacity by 5.02G.", 20.5 * 2 ** 30, 15.48 * 2 ** 30),
])
def test_out_of_memory_messages_are_read(message, needed, available):
    oom = fit.parse_oom(message)
    assert oom.needed == pytest.approx(needed) and oom.available == pytest.approx(available)
    assert oom.short_by == pytest.approx(needed - available)
    assert fit.parse_oom("INVALID_ARGUMENT: bad shape") is None


def test_roofline_is_the_larger_bound():
    stats = aot.CompileStats("train", {"data": 1, "fsdp": 4, "tensor": 1}, 8, 128, 1, "none", 0, 0, 0, 0, 0, 0, 0,
                             flops=197e12, bytes_accessed=819e9 * 0.5, model_flops=4 * 197e12 * 0.5, tokens=1024,
                             compile_s=0.0)
    target = Target("v5e-4", (None,) * 4, CHIPS["v5e"])
    est = estimate(stats, target)
    assert est.step_s == pytest.approx(1.0) and est.compute_s == pytest.approx(1.0)
    assert est.memory_s == pytest.approx(0.5) and est.mfu == pytest.approx(0.5)
    assert est.tokens_per_s == pytest.approx(1024)
    # the FLOPs are taken as they are: no scaling to the model's count, so MFU follows what was compiled
    fewer = dataclasses.replace(stats, flops=197e12 / 8, bytes_accessed=819e9 / 16)
    est = estimate(fewer, target)
    assert est.step_s == pytest.approx(1 / 8) and est.mfu == pytest.approx(4.0)


@needs_extra("libtpu")
@pytest.mark.tpu_compile
def test_tpu_compile_fits_and_estimates(tiny_config):
    target = make_target("v5e-4")
    assert len(target.devices) == 4 and target.chip is CHIPS["v5e"]
    out = fit.compile_with_fix(_config(tiny_config), target, lambda c: aot.compile_train(c, target))
    assert out.fits and out.stats.mesh == {"data": 1, "fsdp": 4, "tensor": 1}
    est = estimate(out.stats, target)
    assert est.step_s > 0 and 0 < est.mfu < 1


@needs_extra("libtpu")
@pytest.mark.tpu_compile
def test_a_chunked_loss_cuts_the_logits_temporaries(tiny_config):
    """The fix the compile tables revealed for a large vocabulary: float32 logits are most of a
    step's temporaries, and ``train.loss_chunk`` keeps one chunk of them alive at a time."""
    c = _config(tiny_config, **{"model.vocab_size": 16384, "data.batch_size": 8, "data.seq_len": 1024,
                                "model.n_layers": 1})
    target = make_target("v5e-4")
    whole = aot.compile_train(c, target)
    chunked = aot.compile_train(fit.with_overrides(c, {"train.loss_chunk": 128}), target)
    logits = 8 * 1024 * 16384 * 4 / 4  # float32 logits per device
    assert whole.temp_bytes > logits > 10 * chunked.temp_bytes, (whole.temp_bytes, chunked.temp_bytes)
    # XLA counts the loop over chunks once; the uncounted chunks are added back: the head dominates
    # this model, and chunking adds one forward recompute of it (6 -> 8 head matmuls)
    assert 1.0 < chunked.flops / whole.flops < 1.45, (chunked.flops, whole.flops)


def test_the_chunked_loss_is_the_first_candidate_for_long_sequences(tiny_config):
    c = _config(tiny_config, **{"data.seq_len": 4096, "data.batch_size": 8, "model.remat": "none"})
    flags = [flag for flag, _ in fit.candidate_fixes(c, 8)]
    assert flags[:2] == ["--config.train.loss_chunk=512", "--config.model.remat=dots"]
    short = _config(tiny_config, **{"model.remat": "none"})
    assert not any("loss_chunk" in flag for flag, _ in fit.candidate_fixes(short, 8))


def _too_big(tiny_config):
    """A batch whose logits alone overflow a v5e's 16 GiB."""
    return _config(tiny_config, **{"model.vocab_size": 65536, "data.batch_size": 512, "data.seq_len": 1024,
                                   "model.n_layers": 1})


@needs_extra("libtpu")
@pytest.mark.tpu_compile
def test_tpu_out_of_memory_is_reported(tiny_config):
    target = make_target("v5e-4")
    out = fit.compile_with_fix(_too_big(tiny_config), target, lambda cc: aot.compile_train(cc, target), search=False)
    assert not out.fits and out.stats is None and out.oom.short_by > 0 and out.fix is None


@needs_extra("libtpu")
@pytest.mark.tpu_compile
@pytest.mark.slow
def test_tpu_out_of_memory_gets_a_confirmed_fix(tiny_config):
    """The compiler refuses the step; a cheaper candidate (remat, micro-batches) it accepts is named."""
    target = make_target("v5e-4")
    out = fit.compile_with_fix(_too_big(tiny_config), target, lambda cc: aot.compile_train(cc, target))
    assert not out.fits and out.oom is not None
    assert out.fix is not None and out.fix_stats.total_bytes <= target.chip.hbm_bytes


def test_grid_compile_table(tmp_path, monkeypatch):
    from edge_jax.grid.compile_table import compile_grid, runs
    from edge_jax.grid.runner import default_load_config
    from edge_jax.grid.spec import load_grid
    monkeypatch.setenv("EDGE_JAX_DATA", str(tmp_path / "data"))
    grid = load_grid("ablations/plm_attention.py", "tiny")
    assert list(runs(grid)) == ["mla", "gqa", "mha"]
    extra = {"model.vocab_size": 256, "model.n_layers": 1, "data.seq_len": 32, "data.batch_size": 8}
    path = compile_grid(grid, _cpu(), {"data": 1, "fsdp": -1, "tensor": 1}, tmp_path, default_load_config, extra,
                        log=lambda s: None)
    text = path.read_text()
    assert path.name == "tiny_compile.md" and "## cpu:8" in text and "| est. MFU |" in text
    assert all(f"| {cell} | data=1,fsdp=8,tensor=1 |" in text for cell in ("mla", "gqa", "mha"))


# the last case has every loop the count adds back (layers, micro-batches, loss chunks) and remat: the fast tier;
# the layer loop alone, with and without remat=full, with -m slow
@pytest.mark.parametrize("extra", [pytest.param({}, marks=pytest.mark.slow),
                                   pytest.param({"model.remat": "full"}, marks=pytest.mark.slow),
                                   {"train.grad_accum": 2, "data.batch_size": 16, "model.remat": "dots",
                                    "train.loss_chunk": 8}])
def test_scanned_and_unrolled_steps_count_the_same_flops(tiny_config, extra):
    """The compiler counts a loop body once; with the scanned layer (and micro-batch, loss-chunk)
    bodies compiled alone and added back, a scanned step counts what the unrolled one does."""
    c = _config(tiny_config, **{"model.n_layers": 4, **extra})
    plain = aot.compile_train(c, _cpu())
    c.model.scan_layers = True
    scanned = aot.compile_train(c, _cpu())
    assert scanned.model_flops == plain.model_flops and scanned.loop_flops > 0.5 * scanned.flops
    assert scanned.flops == pytest.approx(plain.flops, rel=0.03), (scanned.flops, plain.flops)
    assert scanned.bytes_accessed == pytest.approx(plain.bytes_accessed, rel=0.35)


def test_remat_recompute_shows_as_lost_utilisation(tiny_config):
    """MFU is model FLOPs over the corrected compiled ones (compute-bound): remat=full runs the
    layers' forward twice, so its scanned step counts more FLOPs and a lower MFU than without remat."""
    with_chip = Target("cpu:8 as v5e", _cpu().devices, CHIPS["v5e"])
    mfu = {}
    for remat in ("none", "full"):
        c = _config(tiny_config, **{"model.n_layers": 4, "model.scan_layers": True, "model.remat": remat})
        stats = aot.compile_train(c, _cpu())
        mfu[remat] = stats.model_flops / 8 / stats.flops  # the compute side of the roofline
        assert estimate(stats, with_chip).mfu <= mfu[remat] + 1e-9
    assert mfu["full"] < 0.9 * mfu["none"] and mfu["none"] < 1.0, mfu


def test_layers_are_scanned_by_default_unless_asked_or_blocked(tiny_config):
    from edge_jax.compile.command import choose_layers
    c = _config(tiny_config)
    assert choose_layers(c).startswith("scanned (the default") and c.model.scan_layers
    c = _config(tiny_config)
    assert choose_layers(c, unrolled=True) == "unrolled (--unrolled)" and not c.model.scan_layers
    c = _config(tiny_config, **{"model.scan_layers": False})
    assert choose_layers(c, explicit=True).startswith("unrolled (model.scan_layers=False given)")
    assert not c.model.scan_layers
    c = _config(tiny_config, **{"model.moe_experts": 4, "model.moe_top_k": 2, "model.moe_layers": (1,)})
    said = choose_layers(c)
    assert said.startswith("unrolled: model.moe_layers=[1] makes only those layers MoE") and not c.model.scan_layers


def test_the_fix_search_skips_unbuildable_candidates_and_names_the_combination(tiny_config):
    """Candidates accumulate cheapest first; one the mesh cannot build (here grad_accum=2) is skipped."""
    c = _config(tiny_config, **{"model.remat": "none", "data.batch_size": 8})
    target = Target("fake", (None,) * 8, CHIPS["v5e"])
    seen = []

    def compile_for(cfg):
        seen.append((cfg.model.remat, int(cfg.train.grad_accum)))
        if cfg.train.grad_accum == 2:
            raise ConfigError("micro-batch not divisible")
        if cfg.model.remat == "full" and cfg.train.grad_accum == 4:
            return aot.CompileStats("train", {}, 8, 32, 4, "full", 0, 0, 1, 0, 0, 0, 0, 1.0, 1.0, 1.0, 256, 0.0)
        raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
                           "temporaries (20.0G) exceeds available HBM (15.75G).")

    flag, stats = fit.cheapest_fix(c, target, compile_for)
    assert seen == [("dots", 1), ("full", 1), ("full", 2), ("full", 4)]
    assert flag == "--config.model.remat=full --config.train.grad_accum=4" and stats.grad_accum == 4


def test_a_row_that_needs_a_fix_shows_the_step_with_the_fix(tiny_config):
    """The compiler took the step but it overflows the chip: the row says by how much, then gives
    the memory and estimates of the step with the fix, not of the one that overflows."""
    from edge_jax.grid.compile_table import _row
    target = Target("fake", (None,) * 8, CHIPS["v5e"])
    base = aot.CompileStats("train", {"data": 1, "fsdp": 8, "tensor": 1}, 8, 32, 1, "dots", 0, 0, 0, 0, 0, 0, 0,
                            1e12, 1e9, 8e12, 256, 1.0)
    over = dataclasses.replace(base, temp_bytes=int(CHIPS["v5e"].hbm_bytes) + 2 ** 28)
    fixed = dataclasses.replace(base, remat="full", temp_bytes=2 ** 33, compile_s=2.0)
    outcome = fit.Outcome(over, None, False, "--config.model.remat=full", fixed)
    row = _row("cell", _config(tiny_config), target, outcome)
    assert row["fits"] == "no: 256.0 MiB over; fits with --config.model.remat=full"
    assert row["HBM / device"] == "8.00 GiB" and row["compile s"] == "2"


def test_grid_runs_keep_stages_and_stand_in_for_their_weights():
    from edge_jax.grid.compile_table import runs
    from edge_jax.grid.spec import load_grid
    grid = load_grid("ablations/edgeinfinite_main.py", "paper")
    found = runs(grid)
    assert list(found)[:2] == ["stage base", "stage gate"]
    assert found["stage gate"][1]["init_from"] == "<stage base>"
    assert found["edgeinfinite"][1]["train.steps"] == 0  # evaluates only: compile_grid skips it


@needs_extra("libtpu")
@pytest.mark.tpu_compile
@pytest.mark.slow
def test_the_command_prints_the_step_as_it_fits(tiny_config):
    from edge_jax.compile.command import report
    c = _config(tiny_config, **{"model.vocab_size": 65536, "data.batch_size": 512, "data.seq_len": 1024,
                                "model.n_layers": 1, "model.remat": "dots"})
    text, ok = report(c, make_target("v5e-4"), fix=True)
    assert not ok and re.search(r"cheapest fix the compiler confirms +--config\.train\.loss_chunk=512 "
                                r"--config\.model\.remat=full", text)
    assert "with the fix: est. MFU" in text and "with the fix: total / device" in text


@needs_extra("libtpu")
@pytest.mark.tpu_compile
def test_library_attention_kernel_in_a_compiled_tpu_step(tiny_config):
    """``model.kernels=pallas`` compiles the train step for TPU with splash attention (Mosaic, per
    shard under shard_map, chosen for the target though this process runs on CPU): the float32
    [T, T] scores leave the temporaries."""
    shape = {"data.batch_size": 4, "data.seq_len": 2048, "model.n_layers": 1, "model.d_model": 128,
             "model.head_dim": 128}
    target = make_target("v5e-4")
    plain = aot.compile_train(_config(tiny_config, **shape), target)
    kernel = aot.compile_train(_config(tiny_config, **shape, **{"model.kernels": "pallas"}), target)
    scores = 4 * 2048 * 2048 * 4  # one row's float32 scores over its 4 heads (XLA keeps them at 2048 tokens)
    assert plain.temp_bytes > scores and kernel.temp_bytes < plain.temp_bytes / 4
