"""NPUMoE: a top-k MoE LM trained exactly (ragged), then run under static expert capacities.

    edge-jax train --config configs/npumoe.py --workdir /tmp/moe                     # train the MoE LM
    edge-jax moe calibrate --workdir /tmp/moe                                         # loads, tiers, Overlap@K
    edge-jax train --config configs/npumoe.py:strategy=npumoe --config.init_from=/tmp/moe \\
        --config.train.steps=0 --workdir /tmp/moe_npumoe                             # evaluate under a plan

Arguments: size (tiny, paper), base (a workdir whose MoE model to run, e.g. an HF import: ``edge-jax hf
import``; model, tokenizer and init_from come from it), strategy (the moe.strategy the run uses: dropless,
ragged, uniform, npumoe; default uniform). A capacity-bound strategy
needs calibrated loads, so evaluate it with ``train.steps=0`` and ``init_from`` (it calibrates first)
or pass ``moe.plan``. Training uses ``uniform`` at capacity factor 2 (twice the base ``chunk*k/E``, one
call for all 16 experts, overflow dropped by position, as GShard and Switch train): rarely drops, and
on this CPU about 4x faster than ``ragged`` (``jax.lax.ragged_dot`` is slow on CPU) or ``dropless``.

Tiny: the tiny LM's attention (d 128, 4 layers, 4/2 heads x 32) with 16 SwiGLU experts of width 128,
top-2, in every layer, trained for 600 steps on the Python standard library corpus (byte tokens,
256-token sequences) without a load-balancing loss: with a Switch loss of 0.01 the tiny model's routing
on its own corpus came out nearly balanced (imbalance 1.2-1.6 per layer), which leaves NPUMoE's tiers
nothing to do, while the paper's models route skewed at inference (Fig. 5) despite their training
losses (the paper preset keeps 0.01; ``model.moe_aux_weight`` sets it); prefill chunks of 512 tokens, so the
base capacity chunk*k/E is 64, as for PhiMoE at chunk 512. Paper: PhiMoE (16 experts of width 6400,
top-2, 32 layers, d 4096, 32/8 heads x 128, vocabulary 32064).
"""
from edge_jax.config import ConfigError, parse_arg
from edge_jax.layers.moe.strategies import MOE_STRATEGIES
from edge_jax.models.presets import sized_config
from edge_jax.train.workdir import on_base

SIZES = {"tiny": "tiny", "paper": "phimoe"}
MOE = {"tiny": dict(moe_experts=16, moe_top_k=2, moe_d_ff=128, moe_aux_weight=0.0),
       "paper": dict(moe_experts=16, moe_top_k=2, moe_d_ff=6400, moe_aux_weight=0.01)}
TINY_TRAIN = dict(data=dict(seq_len=256, batch_size=16),
                  train=dict(steps=600, lr=3e-3, min_lr=3e-4, warmup_steps=40, eval_every=100, eval_batches=8))


def get_config(arg=None):
    a = parse_arg(arg, size="tiny", strategy="uniform", base="")
    for key, value, valid in (("size", a.size, tuple(SIZES)), ("strategy", a.strategy, MOE_STRATEGIES.names())):
        if value not in valid:
            raise ConfigError(f"unknown {key} {value!r} for configs/npumoe.py; valid: {', '.join(valid)}")
    c = sized_config(SIZES[a.size])
    c.model.update(MOE[a.size])
    if a.size == "tiny":
        for section, values in TINY_TRAIN.items():
            c[section].update(values)
    if a.base:  # an imported or trained MoE: its model, tokenizer and init_from
        on_base(c, a.base)
    c.moe.strategy = a.strategy
    if a.strategy == "uniform":  # training: capacity factor 2 (2x the base chunk*k/E), dropped by position
        c.moe.update(capacity=2 * c.moe.chunk * c.model.moe_top_k // c.model.moe_experts, group=16,
                     drop="position")
    return c
