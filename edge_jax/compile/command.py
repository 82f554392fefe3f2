"""``edge-jax compile``: compile a config's train (or decode) step for a TPU slice, simulated CPU
devices or this machine, and print per-device memory, whether it fits, compiled FLOPs and a
roofline step-time / tokens-per-second / MFU estimate (docs/compile.md).

:func:`add_arguments` imports no JAX (``edge-jax compile --help``); the compile imports it when it runs."""
from __future__ import annotations

import argparse
import re
from typing import Callable

from edge_jax.compile.chips import make_target
from edge_jax.errors import ConfigError
from edge_jax.utils.args import at_least, count


def parse_mesh(text: str | None, slices: int) -> dict:
    """``fsdp=64,tensor=2`` -> every mesh axis (unnamed: data = slices, fsdp = the rest, tensor 1)."""
    from edge_jax.config import MESH_AXES
    if not text:
        return {"data": slices, "fsdp": -1, "tensor": 1}
    out = {"data": 1, "fsdp": 1, "tensor": 1}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or key not in MESH_AXES or not re.fullmatch(r"-1|[1-9]\d*", value):
            raise ConfigError(f"--mesh {text!r}: write AXIS=SIZE pairs over {', '.join(MESH_AXES)}, each size "
                              "a positive integer (one may be -1), e.g. --mesh fsdp=64,tensor=2")
        out[key] = int(value)
    return out


SCAN_KEY = "model.scan_layers"


def choose_layers(config, unrolled: bool = False, explicit: bool = False) -> str:
    """Compile the layers as one scanned body (``model.scan_layers=True``, MaxText's default: a
    paper size compiles in minutes) unless ``unrolled`` (``--unrolled``: one body per layer),
    ``explicit`` (the key was given: it stands) or the model's layers differ (its scan blocker,
    :func:`edge_jax.models.scan.scan_blocker`). Sets the key in ``config``; returns a line that
    says which form is compiled and why."""
    if unrolled:
        config.model.scan_layers = False
        return "unrolled (--unrolled)"
    if explicit:
        return f"{'scanned' if config.model.scan_layers else 'unrolled'} ({SCAN_KEY}={config.model.scan_layers} given)"
    if not config.model.scan_layers:
        from edge_jax.models.scan import scan_blocker
        from edge_jax.train.setup import model_config
        reason = scan_blocker(model_config(config))
        if reason:
            return f"unrolled: {reason}, so the layers cannot be one scanned body"
        config.model.scan_layers = True
    return "scanned (the default; --unrolled compiles one body per layer)"


def load(args, overrides):
    """``(config, layers)``: the config with the command's --batch / --seq / --mesh applied and its
    layers scanned unless --unrolled or the model cannot (:func:`choose_layers`, whose line is ``layers``)."""
    from edge_jax.config import load_config
    config = load_config(args.config, overrides)
    if args.batch:
        config.data.batch_size = args.batch
    if args.seq:
        config.data.seq_len = args.seq
    config.mesh.update(parse_mesh(args.mesh, args.slices))
    explicit = any(o.partition("=")[0].strip() == SCAN_KEY for o in overrides)
    if args.decode and not explicit:  # the KV-cache decoder runs the stack one layer at a time
        config.model.scan_layers = False
        return config, "unrolled (the decode step reads a KV cache per layer)"
    return config, choose_layers(config, args.unrolled, explicit)


def compiler(target, decode: bool = False) -> Callable:
    """``config -> CompileStats`` of the train step (or one decode step) on ``target``."""
    from edge_jax.compile import aot
    if decode:
        return lambda c: aot.compile_decode(c, target, int(c.data.batch_size), int(c.data.seq_len))
    return lambda c: aot.compile_train(c, target)


def report(config, target, decode: bool = False, fix: bool = True, layers: str = "") -> tuple[str, bool]:
    """``(printed table, fits)`` for one config on one target; ``layers`` (from :func:`choose_layers`)
    is printed as its own row."""
    from edge_jax.compile.fit import compile_with_fix
    from edge_jax.compile.report import GPU_NOTE, KERNELS_NOTE, NOTE, describe, fix_row, oom_rows, table
    out = compile_with_fix(config, target, compiler(target, decode), fix)
    if out.stats is None:
        rows = oom_rows(out.oom, target)
    else:
        rows = describe(out.stats, target, 0.0 if decode else float(config.train.steps) * out.stats.tokens)
    if layers:
        rows.insert(1, ("layers", layers))
    if not out.fits and fix:
        rows.append(fix_row(out.fix, out.fix_stats, target))
        if out.fix_stats is not None:  # the step as it fits
            rows += [(f"with the fix: {k}", v) for k, v in describe(out.fix_stats, target, float(
                config.train.steps) * out.fix_stats.tokens)[1:]]
    gpu = target.platform == "gpu"
    note = ("\n" + NOTE if target.chip else "") + ("\n" + GPU_NOTE if gpu else "") + (
        "\n" + KERNELS_NOTE if target.chip and not gpu and config.model.kernels != "xla" else "")
    return table(rows) + note, out.fits


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="path/to/config.py[:arg], e.g. configs/lm.py:size=qwen3_4b")
    p.add_argument("--topology", required=True, help="a Cloud TPU type (v5p-128, v5e-256, v4-64, v6e-16 ...), "
                   "an explicit slice (v5p:4x4x4), an NVIDIA card (h100, h200, a100; 8xh100: eight on one host; "
                   "needs the cuda extra), cpu:N (simulated devices) or local (this machine's devices)")
    p.add_argument("--mesh", default=None, help="AXIS=SIZE over data, fsdp, tensor (default: data = slices, "
                   "fsdp = every other device)")
    p.add_argument("--slices", type=count, default=1, help="TPU slices joined over DCN (the data axis crosses them)")
    p.add_argument("--batch", type=at_least(0), default=0, help="global batch in sequences (default: data.batch_size)")
    p.add_argument("--seq", type=at_least(0), default=0, help="sequence length; with --decode the cache length "
                   "(default: data.seq_len)")
    p.add_argument("--decode", action="store_true", help="compile one decode step with its KV cache instead")
    p.add_argument("--no-fix", action="store_true", help="do not search for a fix when the step does not fit")
    p.add_argument("--unrolled", action="store_true", help="compile one body per layer (model.scan_layers=False) "
                   "instead of the default scanned layers; slow for paper sizes")


def run(args, overrides) -> int:
    target = make_target(args.topology, args.slices)
    config, layers = load(args, overrides)
    text, _ = report(config, target, args.decode, not args.no_fix, layers)
    print(text)
    return 0
