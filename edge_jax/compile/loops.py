"""The work XLA's cost analysis leaves out of a step with loops, compiled alone and added back.

``compiled.cost_analysis()`` counts a while loop's body once, whatever its trip count. A train
step has up to three such loops: the layer scan (``model.scan_layers``; its forward and its
backward are two loops), the loop over loss chunks (``train.loss_chunk``) and the micro-batch
scan (``train.grad_accum``, which holds the other two). Each body is compiled alone here, with
the step's sharding, micro-batch and remat policy, and counted the missing number of times:

* one layer: its forward, remat recompute and backward (:func:`one_layer`), ``n_layers - 1`` more;
* one loss chunk: head, loss and their gradient (:func:`one_loss_chunk`), ``chunks - 1`` more;
* the micro-batch: everything but the optimizer update (:func:`optimizer_update`, compiled alone
  and subtracted), ``grad_accum - 1`` more, with its layers and chunks corrected as above.

So the corrected FLOPs hold what the compiler adds (remat recompute, softmax, norms, the
optimizer), and the MFU computed from them shows it as lost utilisation.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from edge_jax.models.decoder import Block, remat_block
from edge_jax.models.head import chunked_token_losses
from edge_jax.models.inputs import apply_kwargs, host_shapes
from edge_jax.models.scan import STACKED
from edge_jax.sharding import batch_sharding, on_mesh, replicated
from edge_jax.train.step import auxiliary_loss


@dataclasses.dataclass(frozen=True)
class Cost:
    """FLOPs and bytes accessed per device."""
    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops, self.bytes + other.bytes)

    def __mul__(self, k: float) -> "Cost":
        return Cost(self.flops * k, self.bytes * k)


def cost_of(compiled) -> Cost:
    """The compiler's count for a compiled program (per device)."""
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else None) if isinstance(cost, (list, tuple)) else cost
    if not cost:    # XLA's GPU compiler gives none
        return Cost()
    return Cost(float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0)))


def _abstract(x):
    return jax.ShapeDtypeStruct(x.shape, x.dtype) if hasattr(x, "shape") else x


def layer_inputs(model, micro: int, seq: int):
    """``(h, positions, ctx)`` as the first layer of ``model`` sees them (shapes only): caught by
    intercepting :meth:`Block.forward` while the model is initialised abstractly, so whatever the
    memory kind prepares at model level and hands each layer is there."""
    seen = []

    def catch(next_fun, args, kwargs, context):
        if not seen and context.method_name == "forward" and isinstance(context.module, Block):
            seen.append(jax.tree_util.tree_map(_abstract, args))
        return next_fun(*args, **kwargs)

    def init(tokens, host):
        with nn.intercept_methods(catch):
            return model.init(jax.random.key(0), tokens, **apply_kwargs(host))

    host = {k: jax.ShapeDtypeStruct(shape, dtype) for k, (shape, dtype) in host_shapes(model.cfg, micro, seq).items()}
    jax.eval_shape(init, jax.ShapeDtypeStruct((micro, seq), jnp.int32), host)
    return seen[0]


def _one_layer_params(stacked, mesh):
    """One layer's slice of the scanned stack's params, sharded as in the stack (its layer axis dropped)."""
    def cut(x):
        spec = tuple(x.sharding.spec) + (None,) * (len(x.shape) - len(x.sharding.spec))
        return jax.ShapeDtypeStruct(x.shape[1:], x.dtype, sharding=NamedSharding(mesh, P(*spec[1:])))
    return jax.tree_util.tree_map(cut, stacked)


def one_layer(model, params_abs, mesh, micro: int, seq: int, lower=lambda f: f) -> Cost:
    """One layer's forward, remat recompute and backward (as :func:`jax.vjp`: cotangents for its
    params, its input and the shared inputs it reads), compiled alone on ``mesh`` with the step's
    micro-batch; rows over the data axes as in the step. ``lower`` wraps the jitted function's
    ``lower`` (kernel choice for the target)."""
    cfg = model.cfg
    h, positions, ctx = layer_inputs(model, micro, seq)
    params = _one_layer_params(params_abs[STACKED], mesh)
    rows = batch_sharding(mesh)

    def place(x):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rows if x.ndim and x.shape[0] == micro
                                    else replicated(mesh))

    arrays = {k: place(v) for k, v in ctx.items() if hasattr(v, "shape")}
    fixed = {k: v for k, v in ctx.items() if not hasattr(v, "shape")}
    floats = {k: v for k, v in arrays.items() if jnp.issubdtype(v.dtype, jnp.floating)}
    others = {k: v for k, v in arrays.items() if k not in floats}
    # CSE prevention on: alone, outside a loop, XLA would otherwise reuse the forward for the recompute
    block = remat_block(Block, cfg, scanned=False)(cfg, 0)

    def fwd_bwd(params, h, positions, floats, others, g):
        def f(params, h, floats):
            out, variables = block.apply({"params": params}, h, positions, {**fixed, **others, **floats},
                                         mutable=["losses"])
            return out, auxiliary_loss(variables)

        (out, aux), vjp = jax.vjp(f, params, h, floats)
        return out, vjp((g, jnp.ones_like(aux)))  # the output too: in the step it feeds the next layer

    lowered = on_mesh(mesh, lower(jax.jit(fwd_bwd).lower))(params, place(h), place(positions), floats, others,
                                                           place(h))
    return cost_of(lowered.compile())


def one_loss_chunk(cfg, mesh, micro: int, chunk: int) -> Cost:
    """One chunk of a chunked loss: the head, the loss and their gradient (forward, recompute, backward)."""
    dt, rows = jnp.dtype(cfg.dtype), batch_sharding(mesh)  # the vocabulary divides tensor (check_divisible)
    h = jax.ShapeDtypeStruct((micro, chunk, cfg.d_model), dt, sharding=rows)
    w = jax.ShapeDtypeStruct((cfg.d_model, cfg.vocab_size), dt, sharding=NamedSharding(mesh, P(None, "tensor")))
    t = jax.ShapeDtypeStruct((micro, chunk), jnp.int32, sharding=rows)
    b = (jax.ShapeDtypeStruct((cfg.vocab_size,), jnp.dtype(cfg.param_dtype), sharding=NamedSharding(mesh, P("tensor")))
         if cfg.lm_head_bias else None)

    def f(h, w, t, b):
        def loss(h, w, b):
            return jnp.mean(chunked_token_losses(h, w, t, chunk, b))
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(h, w, b)

    return cost_of(on_mesh(mesh, jax.jit(f).lower)(h, w, t, b).compile())


def optimizer_update(state_abs, shardings) -> Cost:
    """The step's work outside the micro-batch loop: the gradient norm and the optimizer update."""
    def update(state, grads):
        return state.apply_gradients(grads=grads), optax.tree.norm(grads)

    step = jax.jit(update, donate_argnums=0, in_shardings=(shardings, shardings.params),
                   out_shardings=(shardings, None))
    return cost_of(step.lower(state_abs, state_abs.params).compile())


def uncounted(config, model, state_abs, shardings, mesh, counted: Cost, lower=lambda f: f) -> Cost:
    """What the compiler's ``counted`` cost of the train step leaves out, per device (zero
    without loops). ``lower`` as in :func:`one_layer`."""
    cfg = model.cfg
    if not counted.flops:   # no cost analysis (a GPU target): nothing to add to
        return Cost()
    accum, seq = int(config.train.grad_accum), int(config.data.seq_len)
    micro, chunk = int(config.data.batch_size) // accum, int(config.train.loss_chunk)
    per_micro = Cost()
    if cfg.scan_layers and cfg.n_layers > 1:
        per_micro += one_layer(model, state_abs.params, mesh, micro, seq, lower) * (cfg.n_layers - 1)
    if 0 < chunk < seq:
        per_micro += one_loss_chunk(cfg, mesh, micro, chunk) * (seq // chunk - 1)
    if accum == 1:
        return per_micro
    outside = optimizer_update(state_abs, shardings)
    body = Cost(counted.flops - outside.flops, counted.bytes - outside.bytes)
    return body * (accum - 1) + per_micro * accum
