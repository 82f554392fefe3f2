"""Paper sizes build abstractly and match the papers' parameter counts; one step lowers on a mesh."""
import jax
import jax.numpy as jnp
import pytest

from edge_jax.config import load_config
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.count import param_breakdown, report_params
from edge_jax.models.presets import PAPER_PARAMS
from edge_jax.sharding import make_mesh
from edge_jax.train.optim import make_optimizer
from edge_jax.train.state import abstract_train_state
from edge_jax.train.step import make_train_step


@pytest.mark.parametrize("size", sorted(PAPER_PARAMS))
def test_paper_sizes_match_ram_params(size):
    cfg = load_config(f"configs/lm.py:size={size}")
    total = param_breakdown(ModelConfig.from_config(cfg.model))["total"]
    assert abs(total / PAPER_PARAMS[size] - 1) <= 0.03
    assert "within 3%" in report_params(cfg)


def test_paper_step_shards_and_traces_abstractly():
    cfg = load_config("configs/lm.py:size=qwen3_0p6b", {"mesh.data": 1, "mesh.fsdp": 4, "mesh.tensor": 2,
                                                          "data.batch_size": 8, "data.seq_len": 64})
    mesh = make_mesh(cfg.mesh, jax.devices()[:8])
    model = DecoderLM(ModelConfig.from_config(cfg.model))
    tx, schedule = make_optimizer(cfg.train)
    abstract, shardings = abstract_train_state(model, tx, mesh)
    emb = shardings.params["embed"]["embedding"].spec
    assert tuple(emb) == ("tensor", "fsdp")  # (vocab, embed)
    batch = {k: jax.ShapeDtypeStruct((8, 64), jnp.int32) for k in ("inputs", "targets")}
    new_state, metrics = jax.eval_shape(make_train_step(1, schedule), abstract, batch)
    assert metrics["loss"].shape == () and new_state.params["embed"]["embedding"].shape == (151_680, 1024)
