"""EdgeInfinite: a memory-gating module trained on a frozen base, evaluated on long-context tasks.

    edge-jax train --config configs/edgeinfinite.py:stage=copy --workdir /tmp/ei_copy    # copying starts
    edge-jax train --config configs/edgeinfinite.py:stage=copy --config.init_from=/tmp/ei_copy \\
        --workdir /tmp/ei_copy2                                   # again: pass keys are retrieved
    edge-jax train --config configs/edgeinfinite.py:stage=base --config.init_from=/tmp/ei_copy2 \\
        --workdir /tmp/ei_base                                    # the base LM: multikey too
    edge-jax train --config configs/edgeinfinite.py --config.init_from=/tmp/ei_base --workdir /tmp/ei
    edge-jax train --config configs/edgeinfinite.py:method=snapkv --config.init_from=/tmp/ei_base \\
        --workdir /tmp/ei_snapkv                                  # a KV-cache baseline: evaluation only

Arguments: size (tiny, paper), base (a workdir whose model is the frozen base, e.g. an HF import:
``edge-jax hf import``; the gate stage's model, tokenizer and init_from come from it), stage (copy, tiny
only: a schedule of the base LM on longctx and copies, run twice, the second from the first's weights;
base: train the dense base LM, the tiny one from the second copy run's weights; gate: train only the
memory-gating module on the frozen base from init_from, then evaluate), method (edgeinfinite, or any
other KV_METHODS name, a KV-cache baseline: no training, the base from init_from evaluated with that
cache).

Tiny: the dense tiny LM (d 128, 4 layers, byte tokens, RoPE base 10,000) trained on 512-token windows,
each one whole document, in three schedules (each a warm-up and a cosine): copy, 1,500 steps on
``longctx`` documents (retrieval drills and task examples) and, one for one, ``copies`` documents
(random strings written 2-4 times in a row), on which copying starts (without them no induction head
forms in the base's budget); copy again from those weights, in which pass keys come to be retrieved;
then base, 1,000 steps on ``longctx`` and as many ``drills`` documents (retrieval drills alone), whose
many key-value lookups teach it to match a question's key (the measurements behind each step are in
docs/edgeinfinite.md). After training the base is checked on passkey and multikey prompts inside its
window. EdgeInfinite keeps 32 sink and 32 window tokens around 128-token segments (the paper's 300 /
200 / 2048, scaled), so the local cache never passes 192 tokens (every stage sets the harness's
longctx.budget to that and StreamingLLM's longctx.sink to the same sink), and the gate trains on 800-token
windows of whole longctx documents (5 segments each). The gate logits start at -2 (memory weight 0.12,
so training starts close to the base; the paper does not say) and learn at 0.05. Cells evaluate one
prompt per task at 2,079, 2,111, 4,127, 4,159, 8,223 and 8,255 tokens (4-16 x the window, the paper's band:
longctx/overall) and at 543, 575, 1,055 and 1,087 (the near band, 1-2 x: longctx/near/*); at each pair of
lengths one makes dropping the window change what is kept with the sink, the other without it
(papers/edgeinfinite/layouts.py). Paper: sink 300,
window 200, segment 2048, the gate trained at lr 0.005; BlueLM-3B's shape is not published, so the
Qwen3-4B shape stands in.
"""
from edge_jax.config import ConfigError, parse_arg
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.models.presets import sized_config
from edge_jax.papers.edgeinfinite.config import GATE
from edge_jax.papers.edgeinfinite.layouts import table2_lengths
from edge_jax.train.workdir import on_base

GATE_LR = (".*memory_gate/g=10.0",)  # the gate logits learn at 10 x train.lr (0.05 at lr 0.005)

STAGES = ("copy", "base", "gate")
SIZES = {"tiny": "tiny", "paper": "qwen3_4b"}

# Documents of exactly 511 characters (+ eos = one 512-token window each), see edge_jax.data.builders.longctx.
# copy: beside every longctx document one of copies (as long), on which copying starts; base: beside it one
# of drills (retrieval drills alone), whose many key-value lookups teach matching a question's key
WINDOW = dict(longctx_length=511, longctx_examples=16000, seq_len=512, batch_size=8)
BASE_TRAIN = dict(lr=3e-3, min_lr=3e-4, warmup_steps=60, eval_every=100, eval_batches=8)
TINY = dict(
    copy=dict(data=dict(name="longctx+copies", **WINDOW), train=dict(steps=1500, **BASE_TRAIN)),
    base=dict(data=dict(name="longctx+drills", **WINDOW), train=dict(steps=1000, **BASE_TRAIN),
              longctx=dict(inwindow_examples=20, inwindow_lengths=(384, 500))),
    gate=dict(data=dict(name="longctx", longctx_length=799, longctx_examples=2000, seq_len=800, batch_size=8),
              train=dict(steps=150, lr=5e-3, min_lr=5e-4, warmup_steps=15, eval_every=50, eval_batches=4,
                         lr_multipliers=GATE_LR)),
    infini=dict(infini_hidden=32, infini_sink=32, infini_window=32, infini_segment=128, infini_gate_init=-2.0),
    # RoPE: the tiny preset's 500,000 leaves a 32-wide head two rotating pairs faster than 0.1 rad per token; 10,000
    # gives five, which local (previous-token) attention and so copying need
    model=dict(rope_theta=10_000.0),
    # the paper's band, 4, 8 and 16 x the base's 512-token window (longctx/overall), and a near band at 1 and 2 x
    # (longctx/near/*), just past the window it retrieves in; each target becomes two lengths, one where dropping the
    # window changes what is kept with the sink and one where it does so without (Table 2, layouts.py)
    lengths=(2048, 4096, 8192), near_lengths=(512, 1024), examples=1,
)
PAPER = dict(
    base=dict(data=dict(seq_len=4096)),
    gate=dict(data=dict(seq_len=8192, batch_size=32), train=dict(steps=6250, lr=5e-3, min_lr=5e-4, warmup_steps=100,
                                                                lr_multipliers=GATE_LR)),
    infini=dict(infini_hidden=20, infini_sink=300, infini_window=200, infini_segment=2048, infini_gate_init=-2.0),
)


def get_config(arg=None):
    a = parse_arg(arg, size="tiny", stage="gate", method="edgeinfinite", base="")
    choices = (("size", a.size, tuple(SIZES)), ("stage", a.stage, STAGES), ("method", a.method, KV_METHODS.names()))
    for key, value, valid in choices:
        if value not in valid:
            raise ConfigError(f"unknown {key} {value!r} for configs/edgeinfinite.py; valid: {', '.join(valid)}")
    preset = TINY if a.size == "tiny" else PAPER
    c = sized_config(SIZES[a.size])
    c.model.update(preset.get("model", {}))
    sizes = preset["infini"]
    c.model.update({k: v for k, v in sizes.items() if k not in ("infini_hidden", "infini_gate_init")})
    # the baselines at EdgeInfinite's cache: its most slots per layer, StreamingLLM with its sink tokens
    c.longctx.update(sink=sizes["infini_sink"],
                     budget=sizes["infini_sink"] + sizes["infini_window"] + sizes["infini_segment"])
    if a.stage in ("copy", "base"):
        if a.method != "edgeinfinite":
            raise ConfigError(f"stage={a.stage} trains the base LM; pass method= only with stage=gate")
        if a.stage not in preset:
            raise ConfigError(f"stage={a.stage} is a tiny-preset schedule; size={a.size} has stages "
                              f"{', '.join(k for k in STAGES if k in preset)}")
        for section, values in preset[a.stage].items():
            c[section].update(values)
        return c
    for section, values in preset["gate"].items():
        c[section].update(values)
    c.longctx.method = a.method
    if a.method == "edgeinfinite":
        c.model.update(infini_hidden=sizes["infini_hidden"], infini_gate_init=sizes["infini_gate_init"])
        c.train.trainable = GATE
    else:  # a KV-cache baseline evaluates the base as it is
        c.train.steps = 0
    if a.base:  # an imported or trained base: its model (but the memory's own keys) and init_from
        if a.stage != "gate":
            raise ConfigError("base= gives the gate stage its frozen base; use it with stage=gate")
        on_base(c, a.base, keep=("infini_",))
    if a.size == "tiny":
        sizes = (c.model.infini_sink, c.model.infini_window, c.model.infini_segment)
        c.longctx.update(lengths=table2_lengths(preset["lengths"], *sizes),
                         near_lengths=table2_lengths(preset["near_lengths"], *sizes), examples=preset["examples"])
    return c
