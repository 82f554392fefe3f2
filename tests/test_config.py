import re

import pytest
from helpers import requires_devices

from edge_jax.cli import _split_config_overrides
from edge_jax.config import ConfigError, load_config

SPEC = "configs/lm.py:size=tiny"


def test_overrides_are_typed():
    c = load_config(SPEC, ["train.steps=7", "train.warmup_steps=2", "train.lr=1e-3", "model.qk_norm=false",
                           "train.schedule=wsd"])
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


@requires_devices(8)
def test_mesh_conflicts_are_named():
    import jax

    from edge_jax.sharding import check_divisible, make_mesh
    c = load_config(SPEC, {"mesh.data": 16})
    with pytest.raises(ConfigError, match="needs 16 devices"):
        make_mesh(c.mesh, jax.devices()[:8])
    c = load_config(SPEC, {"mesh.data": 1, "mesh.tensor": 8, "model.vocab_size": 320})
    with pytest.raises(ConfigError, match="model.n_heads=4 is not divisible by mesh.tensor=8"):
        check_divisible(c, make_mesh(c.mesh, jax.devices()[:8]))


def test_get_config_may_not_invent_keys(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("from edge_jax.config import base_config\n\n"
                    "def get_config(arg=None):\n    c = base_config()\n    c.model.meki_fusoin = 'add_silu'\n"
                    "    return c\n")
    with pytest.raises(ConfigError,
                       match=r"unknown config key 'model\.meki_fusoin'; did you mean 'model\.meki_fusion'"):
        load_config(str(path))


def test_model_config_refuses_unknown_keys():
    import dataclasses

    from edge_jax.config import base_config
    from edge_jax.models import ModelConfig
    model = dict(base_config().model)
    cfg = ModelConfig.from_config(model)
    assert {f.name for f in dataclasses.fields(cfg)} == set(model) | {"moe_exec"}  # one declaration, both read it
    with pytest.raises(ConfigError, match="unknown model key 'meki_fusoin'"):
        ModelConfig.from_config({**model, "meki_fusoin": "add_silu"})


def test_every_key_is_declared_once():
    from edge_jax.config import base_config, flatten
    from edge_jax.registry import SECTIONS
    declared = [f"{s.section}.{k}" for _, s in SECTIONS.items() for k in s.defaults()]
    assert len(declared) == len(set(declared))
    assert set(declared) <= set(flatten(base_config()))


def test_old_workdir_configs_upgrade():
    from edge_jax.config import upgrade_config
    old = {"train": {"trainable": "memory_gate", "gate_lr": 0.05, "lr": 0.005, "steps": 3}, "model": {"d_model": 8}}
    new = upgrade_config(old)
    assert new["train"]["trainable"] == ".*memory_gate.*" and "gate_lr" not in new["train"]
    assert new["train"]["lr_multipliers"] == [".*memory_gate/g=10.0"] and new["model"] == {"d_model": 8}
    assert upgrade_config({"train": {"trainable": "all", "gate_lr": 0.0}})["train"] == {"trainable": ".*"}


@pytest.mark.parametrize("overrides,needle", [
    ({"train.trainable": "(unclosed"}, "train.trainable='(unclosed' is not a regular expression"),
    ({"train.lr_multipliers": "['.*g']"}, "must read REGEX=MULT"),
    ({"train.lr_multipliers": "['.*g=-1']"}, "with a positive number"),
])
def test_trainable_patterns_are_checked(overrides, needle):
    with pytest.raises(ConfigError) as e:
        load_config(SPEC, overrides)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_registry_names_and_errors():
    from edge_jax.registry import Registry
    reg = Registry("colour", key="paint.colour")
    reg.register("red", 1)

    @reg.register("green")
    def green():
        return 2

    assert reg.names() == ("red", "green") and reg.get("green") is green and "red" in reg
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("red", 3)
    with pytest.raises(ConfigError, match=r"unknown paint\.colour value 'rde'; did you mean 'red'"):
        reg.get("rde")


def test_values_of_the_wrong_kind_and_broken_config_files_are_one_line(tmp_path):
    for override, says in (("train.steps=[1]", "'train.steps' needs a number, got '[1]'"),
                           ("data.batch_size={}", "'data.batch_size' needs a number"),
                           ("model.engram_layers=5", "'model.engram_layers' needs a list like [1,2]"),
                           ("train.steps=0", "train.steps=0 only evaluates another run: set init_from=")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_config("configs/lm.py:size=tiny", [override])
    with pytest.raises(ConfigError, match="'train.steps' needs a number, got 'x'"):
        load_config("configs/lm.py:size=tiny", {"train.steps": "x"})
    with pytest.raises(ConfigError, match=r"'train.steps' needs a number, got \[2\]"):
        load_config("configs/lm.py:size=tiny", {"train.steps": [2]})            # a grid's Python value
    raises, broken = tmp_path / "raises.py", tmp_path / "broken.py"
    raises.write_text("def get_config(arg):\n    raise KeyError('size')\n")
    broken.write_text("def get_config(arg:\n")
    with pytest.raises(ConfigError, match=r"get_config\(None\) of .*raises.py' raised KeyError: size; fix"):
        load_config(str(raises))
    with pytest.raises(ConfigError, match=r"broken.py' failed to load \(SyntaxError: "):
        load_config(str(broken))
