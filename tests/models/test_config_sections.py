"""A ``model`` Section registered after edge_jax.models.config was imported reaches ModelConfig."""
import dataclasses
import pickle

import pytest

from edge_jax.config import base_config
from edge_jax.errors import ConfigError
from edge_jax.models import ModelConfig
from edge_jax.models.config import refresh_model_config
from edge_jax.registry import SECTIONS, Section


@dataclasses.dataclass(frozen=True)
class LateKeys:
    late_test_width: int = 7
    late_test_kind: str = "plain"


@pytest.fixture
def late_section():
    """LateKeys registered as a model section for one test (under a name no module uses), then gone
    and ModelConfig made again without it."""
    name = "test_late_model_section"
    assert name not in SECTIONS  # imports every plugin first: this registration comes after them all
    before = ModelConfig()
    try:
        with SECTIONS.override(name, Section("model", LateKeys)):
            yield before
    finally:
        refresh_model_config()
    assert "late_test_width" not in {f.name for f in dataclasses.fields(ModelConfig)}


def test_a_late_model_section_reaches_model_config(late_section):
    identity = ModelConfig
    model = base_config().model
    assert model.late_test_width == 7  # base_config() has the key ...
    cfg = ModelConfig.from_config({**model, "late_test_width": 3})  # ... and from_config takes it
    assert cfg.late_test_width == 3 and cfg.late_test_kind == "plain"
    assert ModelConfig is identity and isinstance(cfg, ModelConfig)
    assert dataclasses.replace(cfg, late_test_kind="fancy").late_test_kind == "fancy"
    assert pickle.loads(pickle.dumps(cfg)) == cfg and hash(cfg) == hash(dataclasses.replace(cfg))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.late_test_width = 1
    # one made before the section arrived reads its defaults, and still equals a fresh default one
    assert late_section.late_test_width == 7 and late_section == ModelConfig()
    with pytest.raises(ConfigError, match="unknown model key 'late_test_widht'; did you mean 'late_test_width'"):
        ModelConfig.from_config({"late_test_widht": 3})


def test_without_the_late_section_its_key_is_refused():
    with pytest.raises(ConfigError, match="unknown model key 'late_test_width'"):
        ModelConfig.from_config({"late_test_width": 3})
