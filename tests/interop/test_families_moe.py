"""Qwen3-MoE and DeepSeek-V2 families against random tiny transformers models: logits, the top-k experts of
every token and MoE layer, export back bit for bit, config round trips and refusals."""
import numpy as np
import pytest
from helpers import require_extra

pytestmark = require_extra("torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402
from parity import (  # noqa: E402
    assert_roundtrip,
    greedy_tokens,
    imported,
    max_logit_diff,
    our_apply,
    random_tokens,
    tiny_model,
)

from edge_jax.interop.convert import model_config_from_hf  # noqa: E402
from edge_jax.interop.family import Unsupported  # noqa: E402

TOL = 1e-4
V = 300
QWEN = dict(vocab_size=V, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, intermediate_size=96, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
            max_position_embeddings=64, initializer_range=0.05)
DSV2 = dict(vocab_size=V, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, kv_lora_rank=24,
            qk_nope_head_dim=16, v_head_dim=16, qk_rope_head_dim=8, intermediate_size=96, moe_intermediate_size=32,
            n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3, topk_method="group_limited_greedy",
            n_group=4, topk_group=2, routed_scaling_factor=1.7, first_k_dense_replace=1, q_lora_rank=None,
            rms_norm_eps=1e-6, max_position_embeddings=64, initializer_range=0.05, tie_word_embeddings=False)


def qwen(**kw):
    return tiny_model(transformers.Qwen3MoeForCausalLM, transformers.Qwen3MoeConfig, **{**QWEN, **kw})


def deepseek(**kw):
    return tiny_model(transformers.DeepseekV2ForCausalLM, transformers.DeepseekV2Config, **{**DSV2, **kw})


CASES = {
    "qwen3_moe": lambda: qwen(norm_topk_prob=False),
    "qwen3_moe-norm": lambda: qwen(norm_topk_prob=True, tie_word_embeddings=True),
    "qwen3_moe-mlp_only": lambda: qwen(norm_topk_prob=True, mlp_only_layers=[1]),
    "deepseek_v2": lambda: deepseek(),
    "deepseek_v2-q_lora": lambda: deepseek(q_lora_rank=20, topk_method="greedy", n_group=None, topk_group=None,
                                           tie_word_embeddings=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case):
    assert max_logit_diff(CASES[case](), random_tokens(V)) <= TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_gives_back_every_tensor(case):
    assert_roundtrip(CASES[case]())


YARN = dict(rope_type="yarn", rope_theta=10_000.0, factor=4.0, original_max_position_embeddings=16, mscale=1.0,
            mscale_all_dim=0.5)


def test_deepseek_v2_yarn_logits_match_transformers():
    """YaRN frequencies and DeepSeek's softmax scale ``yarn_get_mscale(factor, mscale_all_dim)**2``, past the
    original length (40 > 16 positions)."""
    model = deepseek(rope_parameters=YARN)
    try:
        model_config_from_hf(model.config.to_dict())
    except Unsupported as e:  # before edge_jax.interop.rope takes yarn
        pytest.skip(str(e))
    assert max_logit_diff(model, random_tokens(V, length=40)) <= TOL
    assert_roundtrip(model)


def test_rope_layout_matters(monkeypatch):
    """The test itself: without the interleaved -> half-split reorder of the rope rows, logits differ."""
    from edge_jax.interop.families import deepseek_v2
    monkeypatch.setattr(deepseek_v2, "rope_perm", lambda R: np.arange(R))
    assert max_logit_diff(deepseek(), random_tokens(V)) > 100 * TOL


def _hf_topk(model, tokens) -> dict:
    """``{layer: sorted top-k ids [N, J]}`` of transformers' routers, hooked on their outputs."""
    found = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, i=int(name.split(".")[2]): found.__setitem__(
        i, np.sort(out[2].numpy(), -1))) for name, m in model.named_modules() if name.endswith("mlp.gate")]
    with torch.no_grad():
        model(torch.from_numpy(tokens))
    for h in hooks:
        h.remove()
    return found


@pytest.mark.parametrize("case", ["qwen3_moe-mlp_only", "deepseek_v2"])
def test_same_experts_as_transformers(case):
    model, tokens = CASES[case](), random_tokens(V)
    _, _, cfg, params = imported(model)
    _, inter = our_apply(cfg, params, tokens, mutable=["intermediates"])
    ours = {i: np.sort(np.asarray(inter["intermediates"][f"layers_{i}"]["moe"]["routing"][0]["ids"]).reshape(
        -1, cfg.moe_top_k), -1) for i in cfg.moe_layer_ids()}
    theirs = _hf_topk(model, tokens)
    assert sorted(ours) == sorted(theirs) == ([0, 2] if case.startswith("qwen") else [1, 2])
    for i in ours:
        np.testing.assert_array_equal(ours[i], theirs[i])


def test_config_keys_and_export_config():
    _, fam, cfg = model_config_from_hf(qwen(mlp_only_layers=[1], norm_topk_prob=True).config.to_dict())
    assert (cfg.moe_experts, cfg.moe_top_k, cfg.moe_d_ff, cfg.d_ff, cfg.moe_layers, cfg.moe_renormalize) == \
        (8, 2, 32, 96, (0, 2), True)
    back = fam.hf_config(cfg)
    assert (back["mlp_only_layers"], back["decoder_sparse_step"], back["num_experts"]) == ([1], 1, 8)
    assert model_config_from_hf(back)[2] == cfg
    sparse = model_config_from_hf({**back, "mlp_only_layers": [], "decoder_sparse_step": 2})[2]
    assert sparse.moe_layers == (1,)

    _, fam, cfg = model_config_from_hf(deepseek().config.to_dict())
    assert (cfg.attention, cfg.moe_layers, cfg.moe_router, cfg.moe_n_group, cfg.moe_topk_group, cfg.moe_routed_scale,
            cfg.moe_shared_d_ff, cfg.moe_renormalize) == ("mla", (1, 2), "group_limited", 4, 2, 1.7, 64, False)
    back = fam.hf_config(cfg)
    assert model_config_from_hf(back)[2] == cfg
    assert model_config_from_hf({**back, "moe_layer_freq": 2})[2].moe_layers == (2,)
    dense = model_config_from_hf({**back, "first_k_dense_replace": 3})[2]
    assert dense.moe_experts == 0 and fam.hf_config(dense)["first_k_dense_replace"] == 3


@pytest.mark.parametrize("key,value", [
    ("norm_topk_prob", True), ("topk_method", "noaux_tc"), ("scoring_func", "sigmoid"), ("rms_norm_eps", 1e-5),
    ("v_head_dim", 32), ("attention_bias", True), ("num_key_value_heads", 2), ("q_lora_rank", 0),
    ("hidden_act", "gelu"), ("moe_layer_freq", 0),
])
def test_deepseek_v2_refusals_are_one_line(key, value):
    d = deepseek().config.to_dict()
    with pytest.raises(Unsupported) as e:
        model_config_from_hf({**d, key: value})
    assert "\n" not in str(e.value) and key in str(e.value)


def test_unexportable_settings_are_refused():
    import dataclasses
    _, fam, cfg = model_config_from_hf(deepseek().config.to_dict())
    for change, match in [(dict(moe_layers=(0, 2)), "moe_layers"), (dict(moe_renormalize=True), "renormalize"),
                          (dict(moe_router="sparsemixer", moe_top_k=2), "sparsemixer")]:
        with pytest.raises(Unsupported, match=match):
            fam.hf_config(dataclasses.replace(cfg, **change))
    _, fam, cfg = model_config_from_hf(qwen().config.to_dict())
    with pytest.raises(Unsupported, match="group_limited"):
        fam.hf_config(dataclasses.replace(cfg, moe_router="group_limited"))


@pytest.mark.parametrize("case", ["qwen3_moe-mlp_only", "deepseek_v2"])
def test_greedy_decoding_with_our_kv_cache_matches_generate(case):
    ours, theirs = greedy_tokens(CASES[case](), random_tokens(V, batch=2, length=8))
    np.testing.assert_array_equal(ours, theirs)
