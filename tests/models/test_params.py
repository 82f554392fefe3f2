"""Paper sizes build abstractly and match the papers' parameter counts; one step lowers on a mesh."""
import jax
import jax.numpy as jnp
import pytest
from helpers import requires_devices
from jax.sharding import PartitionSpec as P

from edge_jax.config import load_config
from edge_jax.models import DecoderLM, ModelConfig
from edge_jax.models.count import PARAM_COMPARISONS, param_breakdown, report_params
from edge_jax.papers.meki.params import DENSE_PARAMS, MEKI_PAPER
from edge_jax.sharding import divisible_spec, make_mesh
from edge_jax.train.optim import make_optimizer
from edge_jax.train.state import abstract_train_state
from edge_jax.train.step import make_train_step


@pytest.mark.parametrize("size", sorted(DENSE_PARAMS))
def test_paper_sizes_match_ram_params(size):
    cfg = load_config(f"configs/lm.py:size={size}")
    total = param_breakdown(ModelConfig.from_config(cfg.model))["total"]
    assert abs(total / DENSE_PARAMS[size] - 1) <= 0.03
    assert "within 3%" in report_params(cfg)


def test_params_report_prints_the_registered_comparisons_after_the_counts():
    """MeKi and PLM register theirs (edge_jax/papers/*/params.py); a shape no paper reports gets the counts alone."""
    assert {"meki_table5", "plm_table1"} <= set(PARAM_COMPARISONS.names())
    lines = report_params(load_config("configs/plm.py:size=1p8b")).splitlines()
    assert [line.split(":")[0].strip() for line in lines] == [
        "total (train)", "embedding", "lm_head", "non_embedding", "RAM params", "ROM weights",
        "PLM total", "PLM embedding", "PLM other"]
    assert all("within 3%" in line for line in lines[6:])
    small = report_params(load_config("configs/lm.py:size=qwen3_0p6b", {"model.n_layers": 2, "model.d_ff": 512}))
    assert len(small.splitlines()) == 6 and "paper" not in small


@requires_devices(8)
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


@pytest.mark.parametrize("size", sorted(MEKI_PAPER))
def test_meki_paper_sizes_match_ram_and_rom(size):
    cfg = load_config(f"configs/meki.py:size={size}")
    counts = param_breakdown(ModelConfig.from_config(cfg.model))
    assert abs(counts["ram"] / MEKI_PAPER[size]["ram"] - 1) <= 0.03
    assert abs(counts["rom"] / MEKI_PAPER[size]["rom"] - 1) <= 0.03
    # ROM is exactly L * |V| * d_mem (MeKi §5.4); training-only G adds to the training form only
    assert counts["rom"] == cfg.model.n_layers * cfg.model.vocab_size * cfg.model.d_mem
    assert counts["total"] > counts["ram"] + counts["rom"]
    report = report_params(cfg)
    assert report.count("within 3%") == 2 and "OUTSIDE" not in report


@requires_devices(8)
def test_meki_tables_shard_like_the_embedding():
    """|V| x d_mem tables split rows over tensor and d_mem over fsdp, so no device holds a whole one
    (replicated they were ~8 GiB per device with Adam for Qwen3-0.6B, docs/compile.md)."""
    cfg = load_config("configs/meki.py:size=qwen3_0p6b", {"mesh.data": 1, "mesh.fsdp": 4, "mesh.tensor": 2})
    mesh = make_mesh(cfg.mesh, jax.devices()[:8])
    tx, _ = make_optimizer(cfg.train)
    abstract, shardings = abstract_train_state(DecoderLM(ModelConfig.from_config(cfg.model)), tx, mesh)
    assert tuple(shardings.params["layers_0"]["meki"]["expert"]["memory"].spec) == ("tensor", "fsdp")
    tables = [x.sharding.spec for x in jax.tree_util.tree_leaves(abstract.opt_state)
              if getattr(x, "shape", None) == (151_680, 128)]
    assert len(tables) == 2 * 28 and all(tuple(s) == ("tensor", "fsdp") for s in tables)  # Adam mu, nu


@requires_devices(8)
def test_a_dimension_the_mesh_does_not_divide_is_replicated():
    cfg = load_config("configs/meki.py:size=qwen3_0p6b", {"mesh.data": 1, "mesh.fsdp": 8, "mesh.tensor": 1,
                                                           "model.d_mem": 100})
    mesh = make_mesh(cfg.mesh, jax.devices()[:8])
    tx, _ = make_optimizer(cfg.train)
    _, shardings = abstract_train_state(DecoderLM(ModelConfig.from_config(cfg.model)), tx, mesh)
    meki = shardings.params["layers_0"]["meki"]
    assert tuple(meki["expert"]["memory"].spec) == ("tensor", None)   # 100 does not split 8 ways
    assert tuple(shardings.params["embed"]["embedding"].spec) == ("tensor", "fsdp")


@requires_devices(8)
def test_divisible_spec():
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2}, jax.devices()[:8])
    assert divisible_spec(P(("data", "fsdp"), "tensor"), (8, 6), mesh) == P(("data", "fsdp"), "tensor")
    assert divisible_spec(P(("data", "fsdp"), "tensor"), (6, 5), mesh) == P(None, None)
    assert divisible_spec(P("tensor"), (4, 3), mesh) == P("tensor", None)
