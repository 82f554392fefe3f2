"""PLM: MLA (full-rank query) + ungated ReLU² FFN + tied embeddings, trained with WSDC.

    edge-jax train --config configs/plm.py:size=tiny --workdir /tmp/plm
    edge-jax params --config configs/plm.py:size=1p8b                 # 1.83B vs PLM Table 1
    edge-jax train --config configs/plm.py:size=tiny,attention=gqa ... # a GQA twin

Arguments: size (tiny, 1p8b), attention (mla, gqa: n_heads/2 KV heads, mha: one KV head per query
head), ffn (relu2, swiglu, relu, gelu), match_params (default true: a twin with another attention or
FFN kind gets the d_ff that keeps PLM's non-embedding parameter count, so cells compare at matched size).

The tiny size trains on pystdlib with the byte tokenizer (300 steps of 16 x 128 tokens) and runs
Algorithm 1's sparsity sweep on 4 validation batches after training (``train.sparsity_batches``).
"""
from edge_jax.config import ConfigError, parse_arg
from edge_jax.layers.ffn import FFN_KINDS
from edge_jax.models.presets import sized_config
from edge_jax.papers.plm.variants import plm_variant

SIZES = ("tiny", "1p8b")
# Algorithm 1's sparsity sweep after training, on this many validation batches (train.sparsity_batches).
SPARSITY_BATCHES = {"tiny": 4, "1p8b": 1}
ATTENTION = ("mla", "gqa", "mha")  # PLM's attention twins (edge_jax.papers.plm.variants)


def get_config(arg=None):
    a = parse_arg(arg, size="tiny", attention="mla", ffn="relu2", match_params=True)
    choices = (("size", a.size, SIZES), ("attention", a.attention, ATTENTION), ("ffn", a.ffn, FFN_KINDS.names()))
    for key, value, valid in choices:
        if value not in valid:
            raise ConfigError(f"unknown {key} {value!r} for configs/plm.py; valid: {', '.join(valid)}")
    c = sized_config(f"plm_{a.size}")
    c.train.sparsity_batches = SPARSITY_BATCHES[a.size]
    c.model.update(plm_variant(c.model, a.attention, a.ffn, a.match_params))
    return c
