"""What every family's parity test does with a random tiny transformers model (no download): import its
state dict, compare logits, top-k experts and greedy decoding with transformers, and export it back.

Import this module only from a test that already required torch and transformers.
"""
from __future__ import annotations

import functools

import jax
import numpy as np
import torch

from edge_jax.interop.convert import checkpoint_state, hf_from_params, load_hf_model, model_config_from_hf
from edge_jax.models.decoder import DecoderLM


def perturb_norms(model, seed: int = 0) -> None:
    """Norm weights (and biases) leave their init of 1 (0), so scale conventions are exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layernorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn(p.shape, generator=g))


def tiny_model(cls, config_cls, **config):
    """``cls(config_cls(**config))`` seeded, float32, eager attention, in eval mode, norms perturbed."""
    torch.manual_seed(0)
    c = config_cls(**config)
    c._attn_implementation = "eager"
    model = cls(c).to(torch.float32).eval()
    perturb_norms(model)
    return model


def random_tokens(vocab: int, batch: int = 2, length: int = 24, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, vocab, size=(batch, length), dtype=np.int64)


def imported(model):
    """``(family name, family, cfg, params)`` of an in-memory transformers model, float32."""
    name, fam, _ = model_config_from_hf(model.config.to_dict())
    cfg, params = load_hf_model(model)
    return name, fam, cfg, params


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def our_apply(cfg, params, tokens: np.ndarray, **kwargs):
    """``DecoderLM(cfg).apply(params, tokens, **kwargs)``, jitted: one compile, where the model run op by op
    compiles each of its ops (several times slower for these one-off shapes)."""
    return jax.jit(functools.partial(DecoderLM(cfg).apply, **kwargs))(params, tokens.astype(np.int32))


def our_logits(cfg, params, tokens: np.ndarray) -> np.ndarray:
    return np.asarray(our_apply(cfg, params, tokens))


def max_logit_diff(model, tokens: np.ndarray) -> float:
    """max |Δ logits| between transformers and our import of ``model`` on ``tokens``."""
    _, _, cfg, params = imported(model)
    return float(np.max(np.abs(hf_logits(model, tokens) - our_logits(cfg, params, tokens))))


def exported_state(model) -> dict:
    """Our import of ``model`` exported back to an HF state dict of torch tensors."""
    _, fam, cfg, params = imported(model)
    return {k: torch.from_numpy(np.array(v)) for k, v in hf_from_params(fam, cfg, params)}


def assert_roundtrip(model) -> None:
    """Import then export gives back every tensor of the state dict, bit for bit."""
    tied = model.config.to_dict().get("tie_word_embeddings")
    state = {k: v for k, v in checkpoint_state(model).items()
             if not k.endswith("rotary_emb.inv_freq") and not (tied and k == "lm_head.weight")}
    back = exported_state(model)
    assert sorted(back) == sorted(state)
    for k, v in state.items():
        assert torch.equal(back[k].to(v.dtype), v), k


def greedy_tokens(model, prompt: np.ndarray, new_tokens: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """``(ours, theirs)``: ``new_tokens`` greedy continuations of ``prompt`` [B, T] by our KV-cache decoder
    (:func:`edge_jax.infer.decode.greedy_decode`) and by transformers' ``generate``."""
    from edge_jax.infer.decode import greedy_decode

    _, _, cfg, params = imported(model)
    ours = greedy_decode(DecoderLM(cfg), params["params"], prompt.astype(np.int32), new_tokens)
    with torch.no_grad():
        out = model.generate(torch.from_numpy(prompt), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, num_beams=1, pad_token_id=0, eos_token_id=None)
    return np.asarray(ours), out[:, prompt.shape[1]:].numpy()
