"""TrainState creation, sharded from the start (params never materialise unsharded)."""
from __future__ import annotations

import flax.linen as nn
import jax
from flax.training import train_state

from edge_jax.models.inputs import example_inputs
from edge_jax.sharding import logical_shardings


class TrainState(train_state.TrainState):
    """params, opt_state and step; ``apply_fn``/``tx`` are static."""


def _init_fn(model: nn.Module, tx):
    example = example_inputs(model.cfg)

    def init(rng):
        variables = model.init(rng, **example)
        return TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)

    return init


def abstract_train_state(model: nn.Module, tx, mesh):
    """``(abstract_state, shardings)``: unboxed ShapeDtypeStructs carrying their mesh shardings."""
    boxed = jax.eval_shape(_init_fn(model, tx), jax.random.key(0))
    shardings = logical_shardings(boxed, mesh)
    abstract = jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                      nn.unbox(boxed), shardings)
    return abstract, shardings


def create_train_state(model: nn.Module, tx, mesh, seed: int):
    """Returns ``(state, state_shardings)``; the state is initialised directly in its shardings."""
    init = _init_fn(model, tx)
    shardings = abstract_train_state(model, tx, mesh)[1]
    state = jax.jit(lambda rng: nn.unbox(init(rng)), out_shardings=shardings)(jax.random.key(seed))
    return state, shardings
