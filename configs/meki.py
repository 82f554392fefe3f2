"""MeKi (and the PLE / Engram baselines) on the Qwen3-style decoder.

    edge-jax train --config configs/meki.py:size=tiny --workdir /tmp/meki
    edge-jax params --config configs/meki.py:size=qwen3_1p7b          # RAM / ROM vs Table 5
    edge-jax train --config configs/meki.py:size=tiny,memory=none ...  # the dense baseline

Arguments: size (tiny, tiny_plus, small, qwen3_0p6b, qwen3_1p7b, qwen3_4b), memory (meki, ple,
engram, none), d_mem (0: the size's default: Table 5 at paper sizes, d_model/2 on CPU sizes).

CPU sizes train on pystdlib with the facts corpus mixed in (60 people, its text 64 times, about a
fifth of the training characters) with a 4096-piece BPE vocabulary, since a byte vocabulary would
hide a |V| x d_mem memory. Few people seen often: in 200 steps each biography comes round about 7
times, enough for the dense baseline to recall its facts under new question wordings (the built-in
facts_mc: 0.39 +- 0.04 at seed 0, chance 0.25) without reaching the ceiling; 400 people seen 16 times
left every model at chance. Validation loss is on pystdlib (the first part); after training, 300
held-out facts questions are answered greedily for exact-match recall.
"""
from edge_jax.config import ConfigError, parse_arg
from edge_jax.layers.token_memory.base import MEMORY_KINDS
from edge_jax.layers.token_memory.ngram_hash import engram_placement
from edge_jax.models.presets import sized_config
from edge_jax.papers.meki.params import MEKI_PAPER

CPU_DATA = dict(name="pystdlib+facts*64", tokenizer="spm:4096", facts_entities=60)


def get_config(arg=None):
    a = parse_arg(arg, size="tiny", memory="meki", d_mem=0)
    if a.memory not in MEMORY_KINDS:
        raise ConfigError(f"unknown memory {a.memory!r}; valid: {', '.join(MEMORY_KINDS.names())}")
    c = sized_config(a.size)
    c.model.memory = a.memory
    paper = MEKI_PAPER.get(a.size)
    c.model.d_mem = a.d_mem or (paper["d_mem"] if paper else c.model.d_model // 2)
    if not paper:
        c.data.update(CPU_DATA)
        # 200 steps, not the dense preset's 300: the seven MeKi grids (19 distinct runs x 2 seeds) then
        # fit in about an hour and a half on a 2-core CPU.
        c.train.update(steps=200, warmup_steps=20, eval_every=100, qa_questions=300)
    if a.memory == "engram":
        # Engram at a third of the depth (the paper puts it in early layers), per-head tables
        # sized so its ROM matches MeKi's L * |V| * d_mem (ngram_hash.matched_table_size).
        vocab = c.model.vocab_size or int(c.data.tokenizer.partition(":")[2] or 256)
        c.model.engram_layers, c.model.engram_table_size = engram_placement(
            c.model.n_layers, vocab, c.model.engram_orders, c.model.engram_heads)
    return c
