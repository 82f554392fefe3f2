"""A random tiny Hugging Face Qwen3 and a byte-level BPE trained here: the pair that lm-evaluation-harness's
HF model and our :class:`~edge_jax.eval.scorer.Scorer` both score, with nothing downloaded.

Used by the parity test (``tests/eval/test_lm_eval_parity.py``) and ``edge-jax bench eval``
(:mod:`edge_jax.bench.eval`). torch, transformers, tokenizers and lm-eval are imported inside the
functions, so this module imports without them.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

EOS = "<|endoftext|>"


def train_bpe(text: str, path: Path, vocab_size: int = 400) -> None:
    """Write a byte-level BPE (256 bytes + eos + merges, ``vocab_size`` ids) trained on ``text`` to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    tok.save(str(path))


def tiny_qwen3(vocab: int, max_length: int):
    """A random tiny ``Qwen3ForCausalLM`` (2 layers, width 64, eager attention, float32, seed 0), its
    norm weights perturbed (1 + 0.3 N(0, 1)) so that a wrong norm would show."""
    import torch
    import transformers
    cfg = transformers.Qwen3Config(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, intermediate_size=128, rms_norm_eps=1e-6,
                                   max_position_embeddings=max_length + 1, initializer_range=0.05,
                                   tie_word_embeddings=False, rope_theta=10_000.0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


@dataclasses.dataclass
class TinyPair:
    """Both sides of one comparison: our tokenizer and HF's on the same ``tokenizer.json``, the HF
    model, and our config and ``{"params": ...}`` converted from it."""
    tokenizer: object      # edge_jax.data.tokenizers.HfTokenizer
    hf_tokenizer: object   # transformers.PreTrainedTokenizerFast
    model: object          # transformers.Qwen3ForCausalLM
    config: object         # edge_jax.models.decoder.ModelConfig
    params: dict


def build(corpus: str, tmp_dir: Path, max_length: int) -> TinyPair:
    """Train the BPE on ``corpus`` (its file goes in ``tmp_dir``), build the model with the vocabulary
    rounded up to a multiple of 64, and convert it."""
    import transformers

    from edge_jax.data.tokenizers import HfTokenizer
    from edge_jax.interop.convert import load_hf_model
    path = Path(tmp_dir) / "tokenizer.json"
    train_bpe(corpus, path)
    ours = HfTokenizer(str(path))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token=EOS, pad_token=EOS)
    model = tiny_qwen3(-(-ours.vocab_size // 64) * 64, max_length)
    cfg, params = load_hf_model(model)
    return TinyPair(ours, hf, model, cfg, params)


def hflm(model, hf_tokenizer, batch_size: int, max_length: int):
    """lm-eval's ``HFLM`` on the model object, on the CPU."""
    from lm_eval.models.huggingface import HFLM
    return HFLM(pretrained=model, tokenizer=hf_tokenizer, batch_size=batch_size, max_length=max_length, device="cpu")
