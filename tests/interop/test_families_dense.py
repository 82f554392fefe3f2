"""Qwen3 and Llama families against random tiny transformers models: logits, and export back bit for bit."""
import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import transformers  # noqa: E402
from parity import (  # noqa: E402
    assert_roundtrip,
    greedy_tokens,
    max_logit_diff,
    random_tokens,
    tiny_model,
)

TOL = 1e-4
TINY = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=96, max_position_embeddings=64, initializer_range=0.05)


# Llama 3.1's RoPE scaling with a pre-training length of 16, so the test's tokens run past it
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


def _model(cls, config_cls, **kw):
    return tiny_model(cls, config_cls, **{**TINY, **kw})


CASES = {
    "qwen3": lambda: _model(transformers.Qwen3ForCausalLM, transformers.Qwen3Config, tie_word_embeddings=True),
    "qwen3-untied": lambda: _model(transformers.Qwen3ForCausalLM, transformers.Qwen3Config, tie_word_embeddings=False),
    "llama": lambda: _model(transformers.LlamaForCausalLM, transformers.LlamaConfig, tie_word_embeddings=False),
    "mistral": lambda: _model(transformers.MistralForCausalLM, transformers.MistralConfig, tie_word_embeddings=False,
                              sliding_window=None),
    "llama3-rope": lambda: _model(transformers.LlamaForCausalLM, transformers.LlamaConfig, tie_word_embeddings=False,
                                  rope_scaling=LLAMA3_ROPE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case):
    model = CASES[case]()
    assert max_logit_diff(model, random_tokens(TINY["vocab_size"])) <= TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_gives_back_every_tensor(case):
    assert_roundtrip(CASES[case]())


@pytest.mark.parametrize("case", ["qwen3", "llama"])
def test_greedy_decoding_with_our_kv_cache_matches_generate(case):
    ours, theirs = greedy_tokens(CASES[case](), random_tokens(TINY["vocab_size"], batch=2, length=8))
    np.testing.assert_array_equal(ours, theirs)


def test_llama3_rope_scaling_matches_past_the_original_length_and_exports_its_parameters():
    from parity import imported

    from edge_jax.interop.rope import rope_hf

    model = CASES["llama3-rope"]()
    assert max_logit_diff(model, random_tokens(TINY["vocab_size"], length=48)) <= TOL
    _, _, cfg, _ = imported(model)
    assert (cfg.rope_scaling, cfg.rope_factor, cfg.rope_original_max_len) == ("llama3", 8.0, 16)
    assert rope_hf(cfg) == model.config.rope_parameters
