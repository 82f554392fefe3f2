"""``--check``: transformers (float32, CPU) and edge_jax on the same random sequences, one line out.

The sequences run past the RoPE scaling's original length where the model has one, so the scaled
frequencies are compared too. transformers is the oracle only: it is imported here and nowhere on the
training path.
"""
from __future__ import annotations

import numpy as np

from edge_jax.utils.extras import require


def check_length(cfg, limit: int = 64) -> int:
    """Sequence length for the comparison: past ``rope_original_max_len`` (when set) by 16 tokens."""
    original = cfg.rope_original_max_len
    return max(limit, original + 16) if original else limit


def compare(hf_dir: str, cfg, params: dict, batch: int = 2, seed: int = 0) -> dict:
    """max |Δ logits| of transformers' model in ``hf_dir`` against ``DecoderLM(cfg)`` with ``params``
    (both float32) on ``batch`` random sequences: ``{max_abs_diff, tokens, transformers}``."""
    import dataclasses

    require("torch", "--check")
    require("transformers", "--check")
    import jax
    import torch
    import transformers

    from edge_jax.models.decoder import DecoderLM

    length = check_length(cfg)
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab_size, size=(batch, length), dtype=np.int64)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    with torch.no_grad():
        theirs = model(torch.from_numpy(tokens)).logits.float().numpy()
    f32 = dataclasses.replace(cfg, dtype="float32", param_dtype="float32")
    params32 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), params)
    ours = np.asarray(DecoderLM(f32).apply({"params": params32}, tokens.astype(np.int32)))
    return {"max_abs_diff": float(np.max(np.abs(ours - theirs))), "tokens": int(tokens.size),
            "transformers": transformers.__version__}


def report(result: dict) -> str:
    return (f"max |Δ logits| = {result['max_abs_diff']:.3g} over {result['tokens']} tokens "
            f"(transformers {result['transformers']}, float32, CPU)")
