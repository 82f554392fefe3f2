import pytest

from edge_jax.cli import _split_config_overrides
from edge_jax.config import ConfigError, load_config

SPEC = "configs/lm.py:size=tiny"


def test_overrides_are_typed():
    c = load_config(SPEC, ["train.steps=7", "train.warmup_steps=2", "train.lr=1e-3", "model.qk_norm=false", "train.schedule=wsd"])
    assert c.train.steps == 7 and isinstance(c.train.steps, int)
    assert c.train.lr == pytest.approx(1e-3) and c.model.qk_norm is False and c.train.schedule == "wsd"


def test_unknown_key_names_nearest():
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.stesp'; did you mean 'train\.steps'"):
        load_config(SPEC, {"train.stesp": 3})


def test_unknown_value_and_size_name_the_valid_ones():
    with pytest.raises(ConfigError, match="did you mean 'wsd'"):
        load_config(SPEC, {"train.schedule": "wsdd"})
    with pytest.raises(ConfigError, match="valid: tiny, tiny_plus, small"):
        load_config("configs/lm.py:size=huge")
    with pytest.raises(ConfigError, match="unknown config argument 'sise'"):
        load_config("configs/lm.py:sise=tiny")


@pytest.mark.parametrize("overrides,needle", [
    ({"model.n_heads": 6, "model.n_kv_heads": 4}, "n_heads=6 is not a multiple of model.n_kv_heads=4"),
    ({"data.batch_size": 6, "train.grad_accum": 4}, "batch_size=6 is not divisible by train.grad_accum=4"),
    ({"train.warmup_steps": 500, "train.steps": 100}, "warmup_steps=500 must be below train.steps=100"),
    ({"train.schedule": "wsdc", "train.decay_fraction": 0.8, "train.tail_fraction": 0.3}, "sum to less than 1"),
    ({"train.steps": "many"}, "needs a number"),
    ({"model.memory": "meki", "model.d_mem": 0}, "model.d_mem=0 must be positive"),
    ({"model.memory": "meki", "model.d_mem": 8, "model.meki_static": False, "model.meki_dynamic": False},
     "both off"),
    ({"model.memory": "meki", "model.d_mem": 8, "model.meki_fusion": "add_tanh"}, "unknown model.meki_fusion"),
    ({"model.memory": "meki", "model.d_mem": 8, "model.meki_position": "before_ffn"},
     "unknown model.meki_position"),
    ({"model.memory": "engram", "model.d_mem": 8, "model.engram_layers": "[9]"}, "engram_layers"),
    ({"model.memory": "memo"}, "did you mean 'meki'"),
])
def test_impossible_combinations_are_one_line(overrides, needle):
    with pytest.raises(ConfigError) as e:
        load_config(SPEC, overrides)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_config_flags():
    rest, ov = _split_config_overrides(["train", "--config", SPEC, "--config.train.steps=5",
                                        "--config.model.d_model", "32", "--workdir", "w"])
    assert rest == ["train", "--config", SPEC, "--workdir", "w"]
    assert ov == ["train.steps=5", "model.d_model=32"]


def test_mesh_conflicts_are_named():
    import jax

    from edge_jax.sharding import check_divisible, make_mesh
    c = load_config(SPEC, {"mesh.data": 16})
    with pytest.raises(ConfigError, match="needs 16 devices"):
        make_mesh(c.mesh, jax.devices()[:8])
    c = load_config(SPEC, {"mesh.data": 1, "mesh.tensor": 8, "model.vocab_size": 320})
    with pytest.raises(ConfigError, match="model.n_heads=4 is not divisible by mesh.tensor=8"):
        check_divisible(c, make_mesh(c.mesh, jax.devices()[:8]))
