"""Model sizes and their generic data / train presets. Qwen3 paper sizes are shapes from MeKi Table 5
(vocab 151680, RoPE theta 5e5); PLM sizes use MLA with a full-rank query, an ungated ReLU² FFN and the
WSDC schedule (PLM Table 1). The papers' own parameter counts, and the comparison ``edge-jax params``
prints beside ours, live with each paper (``edge_jax/papers/<paper>/params.py``); keys only a paper
declares are set by its config file (e.g. ``train.sparsity_batches`` in ``configs/plm.py``)."""
from __future__ import annotations

_QWEN3 = dict(vocab_size=151_680, head_dim=128, n_kv_heads=8, rope_theta=500_000.0, qk_norm=True,
              tie_embeddings=True)

# PLM's architecture choices; rope theta is not in the paper (DeepSeek-V2's default 1e4 is used).
_PLM = dict(attention="mla", ffn="relu2", qk_norm=False, tie_embeddings=True, q_lora_rank=0,
            rope_theta=10_000.0)

MODEL_SIZES = {
    # Trains on a 2-core CPU at several thousand tokens/s (byte vocabulary).
    "tiny": dict(d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=384),
    # A second tiny scale (1.5x wider) for MeKi Table 1's "several scales".
    "tiny_plus": dict(d_model=192, n_layers=4, n_heads=6, n_kv_heads=2, head_dim=32, d_ff=576),
    "small": dict(d_model=256, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=32, d_ff=768),
    "qwen3_0p6b": dict(_QWEN3, d_model=1024, n_layers=28, n_heads=16, d_ff=3072),
    "qwen3_1p7b": dict(_QWEN3, d_model=2048, n_layers=28, n_heads=16, d_ff=6144),
    "qwen3_4b": dict(_QWEN3, d_model=2560, n_layers=36, n_heads=32, d_ff=9728),
    # PLM at tiny scale: PLM-1.8B's ratios (d_c = d/4, d_rope = head_dim/2, d_ff = 4d).
    "plm_tiny": dict(_PLM, vocab_size=0, d_model=128, n_layers=4, n_heads=4, n_kv_heads=4, head_dim=32,
                     d_ff=512, kv_lora_rank=32, d_rope=16),
    # PLM-1.8B, Table 1 (d_nope = value width = 128, d_rope = 64: the released config's head sizes).
    "plm_1p8b": dict(_PLM, vocab_size=151_936, d_model=2048, n_layers=32, n_heads=16, n_kv_heads=16,
                     head_dim=128, d_ff=8192, kv_lora_rank=512, d_rope=64),
    # PhiMoE (NPUMoE's main model): 16 experts of width 6400, top-2 (moe_* come from configs/npumoe.py).
    "phimoe": dict(vocab_size=32_064, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128,
                   d_ff=6400, rope_theta=10_000.0, qk_norm=False, tie_embeddings=False),
}

# PLM §4.2 WSDC: warm-up over 1% of the steps to 3e-4, stable, decay to 3e-5, constant tail; its
# phases are 1.65T + 550B + 280B tokens, which fix the decay and tail fractions.
WSDC = dict(schedule="wsdc", decay_fraction=round(550 / 2480, 4), tail_fraction=round(280 / 2480, 4))

# Data and schedule per size: tiny/small for this CPU, paper sizes follow MeKi §4.1.
TRAIN_PRESETS = {
    "tiny": dict(data=dict(seq_len=128, batch_size=16), train=dict(steps=300, lr=3e-3, min_lr=3e-4,
                                                                    warmup_steps=30)),
    "tiny_plus": dict(data=dict(seq_len=128, batch_size=16), train=dict(steps=300, lr=3e-3, min_lr=3e-4,
                                                                         warmup_steps=30)),
    "small": dict(data=dict(seq_len=256, batch_size=16), train=dict(steps=1000, lr=2e-3, min_lr=2e-4,
                                                                     warmup_steps=100)),
}
_PAPER_TRAIN = dict(data=dict(seq_len=4096, batch_size=256),
                    train=dict(steps=50_000, lr=4e-4, min_lr=2e-4, warmup_steps=500, b1=0.9, b2=0.95,
                               weight_decay=0.1, clip_norm=1.0, schedule="cosine"),
                    model=dict(dtype="bfloat16"))
for _name in ("qwen3_0p6b", "qwen3_1p7b", "qwen3_4b", "phimoe"):
    TRAIN_PRESETS[_name] = _PAPER_TRAIN
TRAIN_PRESETS["plm_tiny"] = dict(data=dict(seq_len=128, batch_size=16),
                                 train=dict(WSDC, steps=300, lr=3e-3, min_lr=3e-4, warmup_steps=30))
# 2.48T tokens in batches of 15M tokens (3,662 sequences of 4,096) on 208 accelerators.
TRAIN_PRESETS["plm_1p8b"] = dict(data=dict(seq_len=4096, batch_size=3662),
                                 train=dict(WSDC, steps=165_000, lr=3e-4, min_lr=3e-5, warmup_steps=1650),
                                 model=dict(dtype="bfloat16"))


def sized_config(size: str):
    """``base_config()`` with the model shape and data/train preset of ``size`` (config files use it)."""
    from edge_jax.config import ConfigError, base_config
    if size not in MODEL_SIZES:
        raise ConfigError(f"unknown size {size!r}; valid: {', '.join(MODEL_SIZES)}")
    c = base_config()
    c.model.update(MODEL_SIZES[size])
    for section, values in TRAIN_PRESETS[size].items():
        c[section].update(values)
    return c


def matching_size(model, names) -> str | None:
    """The first of ``names`` (keys of :data:`MODEL_SIZES`) whose shape ``model`` (``config.model``) has
    in every key the size sets, or None."""
    for name in names:
        if all(model[k] == v for k, v in MODEL_SIZES[name].items()):
            return name
    return None
