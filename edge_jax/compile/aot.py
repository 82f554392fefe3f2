"""Ahead-of-time compilation of the real train step (and the decode step) for a compile target.

The step is the one training runs (:func:`edge_jax.train.step.make_train_step`, jitted with the
train state's shardings and donation, as :mod:`edge_jax.train.loop` does); its arguments are
``jax.ShapeDtypeStruct`` trees carrying NamedShardings over a mesh of the target's devices, so
nothing is allocated and the target's devices need not be present: ``lower(...).compile()`` runs
the target's own compiler (libtpu for a TPU slice). What comes back is the compiler's word on
memory (``memory_analysis``) and work (``cost_analysis``), per device.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from edge_jax.compile import loops
from edge_jax.compile.chips import Target
from edge_jax.compile.loops import Cost, cost_of
from edge_jax.config import MESH_AXES, ConfigError
from edge_jax.layers.kernels import backend
from edge_jax.models import DecoderLM
from edge_jax.models.inputs import host_shapes
from edge_jax.sharding import batch_sharding, check_divisible, check_model_divisible, make_mesh, on_mesh, replicated
from edge_jax.train.flops import model_flops
from edge_jax.train.optim import make_optimizer
from edge_jax.train.setup import model_config
from edge_jax.train.state import abstract_train_state
from edge_jax.train.step import make_train_step
from edge_jax.train.telemetry import memory_bytes


@dataclasses.dataclass
class CompileStats:
    """The compiler's figures for one step, per device (bytes, FLOPs), and the inputs' sizes."""
    step: str                   # "train" or "decode"
    mesh: dict
    batch: int
    seq: int
    grad_accum: int
    remat: str
    state_bytes: int            # params + optimizer state held by one device (from the shardings)
    param_bytes: int
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    flops: float                # FLOPs per device per step: the compiler's count (remat recompute
    bytes_accessed: float       # included) + the loop bodies it counts once (edge_jax.compile.loops)
    model_flops: float          # 6 N T + attention, all devices together (for MFU)
    tokens: int                 # tokens per step
    compile_s: float
    loop_flops: float = 0.0     # the part of ``flops`` added for loop bodies (0: none, or not scanned)

    @property
    def total_bytes(self) -> int:
        """Peak HBM a device holds during the step: arguments and outputs (donated ones counted
        once), temporaries and the program."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.code_bytes


def mesh_for(target: Target, mesh_cfg) -> Mesh:
    """The mesh training builds on ``target``'s devices (:func:`edge_jax.sharding.make_mesh`: within a
    slice along the ICI links, each host's rows one block; with several slices ``data`` crosses them
    over DCN), which must use every one of them."""
    n = len(target.devices)
    sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
    fixed = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or fixed < 1 or n % fixed or (-1 not in sizes and fixed != n):
        raise ConfigError(f"mesh {dict(zip(MESH_AXES, sizes))} does not use the {n} devices of {target.name}; "
                          f"make data*fsdp*tensor = {n} (one axis may be -1)")
    return make_mesh(mesh_cfg, target.devices)


def _per_device_bytes(tree) -> int:
    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if getattr(leaf, "sharding", None) else leaf.shape
        total += int(np.prod(shape)) * jnp.dtype(leaf.dtype).itemsize
    return total


def _stats(step, lowered_fn, mesh, config, tokens, seq, batch, state_abs, params_abs, cfg, train=True,
           uncounted=lambda counted: Cost()):
    start = time.perf_counter()
    compiled = lowered_fn()
    seconds = time.perf_counter() - start
    mem = memory_bytes(compiled)
    if mem is None:
        raise RuntimeError(f"the compiler gives no memory analysis of the {step} step on this backend")
    mem.pop("total_bytes")  # CompileStats.total_bytes adds them up
    counted = cost_of(compiled)
    added = uncounted(counted)
    return CompileStats(step=step, mesh=dict(mesh.shape), batch=batch, seq=seq,
                        grad_accum=int(config.train.grad_accum), remat=str(config.model.get("remat", "none")),
                        state_bytes=_per_device_bytes(state_abs), param_bytes=_per_device_bytes(params_abs),
                        **mem, flops=counted.flops + added.flops, bytes_accessed=counted.bytes + added.bytes,
                        model_flops=model_flops(cfg, tokens, seq, train), tokens=tokens, compile_s=seconds,
                        loop_flops=added.flops)


def for_target(target: Target, lower):
    """``lower`` run with the kernels (``model.kernels``) chosen for the target's platform: a TPU
    slice gets the Mosaic kernels, a GPU card the Triton ones, though this process runs on the CPU
    backend."""
    @functools.wraps(lower)
    def call(*args, **kwargs):
        with backend.targeting(target.platform):
            return lower(*args, **kwargs)

    return call


def check_vocab(config) -> None:
    if not config.model.vocab_size:
        raise ConfigError("model.vocab_size is 0 (taken from the tokenizer at train time); compiling needs it "
                          "fixed: pass --config.model.vocab_size=N or a paper size whose preset sets it")


def compile_train(config: ml_collections.ConfigDict, target: Target) -> CompileStats:
    """Compile the train step of ``config`` (its data.batch_size x data.seq_len, train.grad_accum,
    mesh) for ``target``; a config the target cannot hold fails in the compiler (see
    :func:`edge_jax.compile.fit.compile_or_oom`)."""
    check_vocab(config)
    mesh = mesh_for(target, config.mesh)
    check_divisible(config, mesh)
    cfg = model_config(config)
    model = DecoderLM(cfg)
    tx, schedule = make_optimizer(config.train)
    state_abs, shardings = abstract_train_state(model, tx, mesh)
    b, t = int(config.data.batch_size), int(config.data.seq_len)
    data = batch_sharding(mesh)
    batch = {k: jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=data) for k in ("inputs", "targets")}
    host = host_shapes(cfg, b, t)  # the memory kind's host inputs, their rows over the data axes too
    for name, (shape, dtype) in host.items():
        batch[name] = jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(
            ("data", "fsdp"), *([None] * (len(shape) - 1)))))
    step = jax.jit(make_train_step(config.train.grad_accum, schedule, config.train.loss_chunk), donate_argnums=0,
                   in_shardings=(shardings, None if host else data),
                   out_shardings=(shardings, None))
    lower = functools.partial(for_target, target)
    return _stats("train", lambda: on_mesh(mesh, lower(step.lower))(state_abs, batch).compile(), mesh, config, b * t,
                  t, b, state_abs, state_abs.params, cfg,
                  uncounted=lambda counted: loops.uncounted(config, model, state_abs, shardings, mesh, counted, lower))


def compile_decode(config: ml_collections.ConfigDict, target: Target, batch: int, max_len: int) -> CompileStats:
    """Compile one decode step (one token per row against a ``max_len``-slot KV cache) for ``target``:
    params in their training shardings, the cache's rows over the data axes where they divide."""
    from edge_jax.infer.decode import check_supported, forward_chunk
    from edge_jax.infer.kv_state import empty_caches
    check_vocab(config)
    mesh = mesh_for(target, config.mesh)
    check_model_divisible(config.model, mesh)  # the rows are placed below, over the data axes where they divide
    cfg = model_config(config)
    check_supported(cfg)
    model = DecoderLM(cfg)
    state_abs, _ = abstract_train_state(model, make_optimizer(config.train)[0], mesh)
    params = state_abs.params
    rows = batch % (mesh.shape["data"] * mesh.shape["fsdp"]) == 0
    cache_shapes = jax.eval_shape(lambda: empty_caches(cfg, batch, max_len, plain=True))

    def place(a):
        spec = P(("data", "fsdp"), *([None] * (a.ndim - 1))) if rows and a.ndim and a.shape[0] == batch else P()
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, spec))

    cache = jax.tree_util.tree_map(place, cache_shapes)
    token = jax.ShapeDtypeStruct((batch, 1), jnp.int32, sharding=batch_sharding(mesh) if rows else replicated(mesh))
    lowered = on_mesh(mesh, for_target(target, forward_chunk.lower))
    return _stats("decode", lambda: lowered(model, params, cache, token, {}).compile(), mesh, config,
                  batch, max_len, batch, params, params, cfg, train=False)
