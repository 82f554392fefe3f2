"""A new KV baseline is one class and one registration: registered in KV_METHODS, it is accepted by
config validation, runs in the long-context harness (exact match, answer NLL, peak cache) and is a
cell of EdgeInfinite's Table 1 grid, which is built from the registry."""
import jax
import numpy as np
import pytest
from helpers import perturbed

from edge_jax.config import ConfigError, load_config
from edge_jax.data import get_tokenizer
from edge_jax.infer.kv_baselines import KV_METHODS, StreamingSession
from edge_jax.infer.longctx import evaluate_longctx, make_session
from edge_jax.models import DecoderLM, ModelConfig

NAME = "recent_only"


class RecentOnlySession(StreamingSession):
    """Keeps only the last ``budget`` tokens: StreamingLLM without sink tokens."""
    label = "RecentOnly"

    @classmethod
    def validate(cls, config, budget: int) -> None:
        if budget < 2:
            raise ConfigError(f"longctx.method={NAME} keeps the last longctx.budget tokens: set it >= 2, got {budget}")

    @classmethod
    def from_config(cls, model, params, config, budget: int):
        return cls(model, params, budget, 0, config.longctx.answer_tokens)


@pytest.fixture
def recent_only():
    """The dummy registered for this test only (last, after every plugin's; the registry is left as it was)."""
    with KV_METHODS.override(NAME, RecentOnlySession):
        yield NAME


def _model():
    cfg = ModelConfig(vocab_size=320, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
    model = DecoderLM(cfg)
    return model, perturbed(jax.jit(model.init)(jax.random.key(0), np.zeros((1, 8), np.int32))["params"], 1, scale=0.05)


def test_the_harness_runs_a_registered_baseline(recent_only):
    config = load_config("configs/lm.py:size=tiny", {
        "init_from": "/base", "train.steps": 0, "longctx.method": recent_only, "longctx.budget": 48,
        "longctx.lengths": (380, 420), "longctx.examples": 1, "longctx.tasks": ("passkey", "multikey"),
        "longctx.answer_tokens": 3, "longctx.prefill_chunk": 64})
    model, params = _model()
    session = make_session(recent_only, model, params, config)
    assert isinstance(session, RecentOnlySession) and (session.budget, session.sink) == (48, 0)
    got = evaluate_longctx(model, params, get_tokenizer("byte", "longctx"), config, log=lambda m: None)
    assert got["longctx/prompts"] == 4
    assert 0 <= got["longctx/overall"] <= 100 and 0 < got["longctx/answer_nll"] < 50
    for cat in ("single_needle", "multi_key"):
        assert {f"longctx/{cat}/len380", f"longctx/{cat}/len420", f"longctx/answer_nll/{cat}"} <= set(got)
    assert 48 < got["longctx/peak_cache_tokens"] <= 48 + 24  # the budget, plus at most one chunk before eviction
    with pytest.raises(ConfigError, match=f"longctx.method={recent_only} keeps the last"):
        load_config("configs/lm.py:size=tiny", {"init_from": "/base", "train.steps": 0,
                                                "longctx.method": recent_only, "longctx.budget": 1})


def test_the_table1_grid_has_a_cell_for_every_registered_method(recent_only):
    from edge_jax.grid import spec
    from edge_jax.papers.edgeinfinite.grid import TABLE1, baseline_cell
    grid = spec.load_grid("ablations/edgeinfinite_main.py", "tiny")
    assert list(grid.cells) == ["fullkv", "streamingllm", "snapkv", "pyramidkv", "edgeinfinite", recent_only]
    assert grid.cells[recent_only] == baseline_cell(recent_only) == dict(grid.cells["snapkv"], **{
        "longctx.method": recent_only})
    assert grid.cells[recent_only]["init_from"] == "{stage:base}" and grid.cells["edgeinfinite"]["init_from"] == (
        "{stage:gate}")
    assert recent_only not in TABLE1 and recent_only not in grid.paper.values  # no paper numbers: none shown
    config = load_config(grid.base, grid.overrides(recent_only, 0, {}))  # its cell's config is valid
    assert config.longctx.method == recent_only and config.longctx.budget == 192 and config.model.infini_hidden == 0
