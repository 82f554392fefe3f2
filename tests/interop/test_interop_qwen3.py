"""HF Qwen3 -> DecoderLM interop: logits parity with a random tiny transformers model (no hub access)."""
import json

import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers", "safetensors")
import torch  # noqa: E402
import transformers  # noqa: E402

from edge_jax.interop.qwen3 import (  # noqa: E402
    load_hf_model,
    load_safetensors,
    model_config_from_hf,
    params_from_hf_state_dict,
)
from edge_jax.models.decoder import DecoderLM  # noqa: E402

TOL = 1e-4
TINY = dict(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=128, rms_norm_eps=1e-6, max_position_embeddings=128,
            initializer_range=0.05)


def _hf_config(tie: bool, **kw):
    c = transformers.Qwen3Config(**{**TINY, "tie_word_embeddings": tie, "rope_theta": 10_000.0, **kw})
    c._attn_implementation = "eager"
    return c


def _tiny_model(tie: bool):
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(_hf_config(tie)).to(torch.float32).eval()
    # Norm weights init to 1; perturb them so the scale convention (w vs 1+w) and placement are exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


def _tokens():
    g = np.random.default_rng(1)
    return g.integers(1, TINY["vocab_size"], size=(2, 24), dtype=np.int64)


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.numpy()


def _our_logits(cfg, params, tokens):
    return np.asarray(DecoderLM(cfg).apply(params, tokens.astype(np.int32)))


@pytest.mark.parametrize("tie", [True, False])
def test_logits_match_hf(tie):
    model = _tiny_model(tie)
    tokens = _tokens()
    cfg, params = load_hf_model(model)
    assert cfg.tie_embeddings is tie and cfg.rope_theta == 10_000.0 and cfg.head_dim == 16
    assert ("lm_head" in params["params"]) is (not tie)
    ref = _hf_logits(model, tokens)
    ours = _our_logits(cfg, params, tokens)
    assert ours.shape == ref.shape == (2, 24, TINY["vocab_size"])
    err = float(np.max(np.abs(ours - ref)))
    print(f"tie={tie} max|dlogit|={err:.3e} max|logit|={np.abs(ref).max():.3f}")
    assert err < TOL, err


def test_param_tree_matches_init():
    import flax.linen as nn
    import jax
    model = _tiny_model(False)
    cfg, params = load_hf_model(model)
    init = nn.unbox(jax.eval_shape(DecoderLM(cfg).init, jax.random.PRNGKey(0), np.zeros((1, 4), np.int32)))
    shapes = lambda t: jax.tree_util.tree_map(lambda a: (a.shape, str(a.dtype)), t)  # noqa: E731
    assert shapes(params) == shapes(init)


@pytest.mark.parametrize("tie", [True, False])
def test_safetensors_roundtrip(tie, tmp_path):
    model = _tiny_model(tie)
    tokens = _tokens()
    model.save_pretrained(tmp_path)
    cfg, params = load_safetensors(tmp_path)
    assert cfg == load_hf_model(model)[0]
    err = float(np.max(np.abs(_our_logits(cfg, params, tokens) - _hf_logits(model, tokens))))
    print(f"safetensors tie={tie} max|dlogit|={err:.3e}")
    assert err < TOL, err


def test_safetensors_sharded_bf16(tmp_path):
    model = _tiny_model(False)
    model.to(torch.bfloat16).save_pretrained(tmp_path, max_shard_size="60KB")
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    cfg, params = load_safetensors(tmp_path)
    ref = load_hf_model(model)[1]  # same bf16 weights via torch, upcast to float32
    for a, b in zip(*(__import__("jax").tree_util.tree_leaves(t) for t in (params, ref))):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_wrong_shape_is_one_line_error():
    model = _tiny_model(False)
    cfg = model_config_from_hf(model.config)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    sd["model.layers.1.self_attn.k_proj.weight"] = np.zeros((16, 64), np.float32)
    with pytest.raises(ValueError) as ei:
        params_from_hf_state_dict(sd, cfg)
    msg = str(ei.value)
    assert "\n" not in msg and "model.layers.1.self_attn.k_proj.weight" in msg and "[32, 64]" in msg
    del sd["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.1.self_attn.k_proj.weight'.*\[32, 64\]"):
        params_from_hf_state_dict(sd, cfg)


def test_config_dict_and_unsupported():
    d = _hf_config(True).to_dict()
    cfg = model_config_from_hf(json.loads(json.dumps(d)))
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff) == \
        (300, 64, 2, 4, 2, 16, 128)
    legacy = {k: v for k, v in d.items() if k not in ("rope_parameters", "layer_types")}
    assert model_config_from_hf({**legacy, "rope_theta": 1e6}).rope_theta == 1e6
    bad = {"attention_bias": True, "hidden_act": "gelu",
           "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0},
           "use_sliding_window": True}
    for key, val in bad.items():
        cd = {**legacy, key: val, **({"sliding_window": 8, "max_window_layers": 0} if key == "use_sliding_window"
                                     else {})}
        with pytest.raises(ValueError) as ei:
            model_config_from_hf(cd)
        assert "\n" not in str(ei.value) and (key.split("_")[0] in str(ei.value))
