"""Bad configs: config files, unknown keys and values, wrong types, impossible combinations, meshes.

Each is refused by `edge-jax train` before any file is written (those found once the run has started,
meshes and the vocabulary, leave an empty workdir folder)."""
from harness import Case, train, write_file

NO_GET_CONFIG = "def config():\n    return None\n"
EXTRA_KEY = """from edge_jax.config import base_config


def get_config(arg=None):
    c = base_config()
    c.train.stepz = 5
    return c
"""


def _set(*pairs: str) -> list[str]:
    return train(*(f"--config.{p}" for p in pairs))


CASES = [
    # config files
    Case("config_file_missing", train(config="configs/nope.py"), "config file 'configs/nope.py' not found"),
    Case("config_file_missing_arg_form", train(config="configs/lmm.py:size=tiny"), "not found; pass e.g. --config"),
    Case("config_file_without_get_config", train(config="{tmp}/noget.py"), "defines no get_config(arg); add one",
         setup=write_file("noget.py", NO_GET_CONFIG)),
    Case("config_file_sets_undeclared_key", train(config="{tmp}/extra.py"), "get_config may only set declared keys",
         setup=write_file("extra.py", EXTRA_KEY)),
    Case("config_arg_unknown", train(config="configs/lm.py:sise=tiny"), "unknown config argument 'sise'"),
    Case("config_size_unknown", train(config="configs/lm.py:size=huge"), "unknown size 'huge'; valid:"),
    # keys
    Case("unknown_key_did_you_mean", _set("train.stpes=3"), "did you mean 'train.steps'"),
    Case("unknown_section", _set("trian.steps=3"), "unknown config key 'trian.steps'"),
    Case("override_without_value", [*train(), "--config.train.steps"], "--config.train.steps needs a value"),
    # values of the wrong type
    Case("int_key_given_a_word", _set("train.steps=many"), "config key 'train.steps' needs a number, got 'many'"),
    Case("int_key_given_a_fraction", _set("train.steps=2.5"), "config key 'train.steps' needs an integer"),
    Case("float_key_given_a_word", _set("train.lr=fast"), "config key 'train.lr' needs a number"),
    Case("bool_key_given_a_word", _set("model.qk_norm=maybe"), "config key 'model.qk_norm' needs true/false"),
    Case("list_key_given_garbage", _set("model.engram_layers=[1,"), "needs a list like [1,2]"),
    # unknown values of named choices
    Case("schedule_unknown", _set("train.schedule=cosin"), "unknown train.schedule value 'cosin'; did you mean"),
    Case("ffn_unknown", _set("model.ffn=relu3"), "unknown model.ffn value 'relu3'; did you mean"),
    Case("attention_unknown", _set("model.attention=gqa2"), "unknown model.attention value 'gqa2'; did you mean 'gqa'"),
    Case("memory_unknown", _set("model.memory=mekki"), "did you mean 'meki'"),
    Case("dtype_unknown", _set("model.dtype=float17"), "unknown model.dtype value 'float17'"),
    Case("stream_unknown", _set("data.stream=maybe"), "unknown data.stream value 'maybe'"),
    # values out of range and impossible combinations
    Case("steps_negative", _set("train.steps=-1"), "train.steps must be positive, got -1"),
    Case("lr_zero", _set("train.lr=0"), "train.lr must be positive, got 0"),
    Case("batch_size_zero", _set("data.batch_size=0"), "data.batch_size must be positive"),
    Case("steps_zero_without_init_from", _set("train.steps=0"), "train.steps=0 only evaluates another run"),
    Case("workers_negative", _set("data.workers=-1"), "data.workers=-1 must be >= 0"),
    Case("batch_not_divisible_by_grad_accum", _set("train.grad_accum=3"),
         "data.batch_size=8 is not divisible by train.grad_accum=3"),
    Case("loss_chunk_not_dividing_seq_len", _set("train.loss_chunk=5"), "must be 0 (off) or divide data.seq_len=32"),
    Case("min_lr_above_lr", _set("train.min_lr=1.0"), "train.min_lr=1.0 must lie in [0, train.lr="),
    Case("warmup_not_below_steps", _set("train.warmup_steps=8"), "train.warmup_steps=8 must be below train.steps=8"),
    Case("warmup_negative", _set("train.warmup_steps=-5"), "train.warmup_steps=-5 must be >= 0"),
    Case("adam_b1_not_below_one", _set("train.b1=1.5"), "train.b1=1.5 must be in [0, 1)"),
    Case("weight_decay_negative", _set("train.weight_decay=-5"), "train.weight_decay=-5.0 must be >= 0"),
    Case("adam_eps_zero", _set("train.eps=0"), "train.eps=0.0 must be > 0"),
    Case("wsd_fractions_over_one", _set("train.schedule=wsdc", "train.decay_fraction=0.8", "train.tail_fraction=0.5"),
         "train.decay_fraction=0.8 and train.tail_fraction=0.5"),
    Case("trainable_bad_regex", _set("train.trainable=(attn"), "is not a regular expression"),
    Case("lr_multiplier_without_mult", _set("train.lr_multipliers=['attn']"), "must read REGEX=MULT"),
    Case("lr_multiplier_bad_regex", _set("train.lr_multipliers=['(attn=2']"), "is not a regular expression"),
    Case("d_model_zero", _set("model.d_model=0"), "model.d_model must be positive, got 0"),
    Case("heads_not_multiple_of_kv_heads", _set("model.n_kv_heads=3"),
         "model.n_heads=4 is not a multiple of model.n_kv_heads=3"),
    Case("head_dim_odd", _set("model.head_dim=15"), "model.head_dim=15 must be even for RoPE"),
    Case("vocab_size_negative", _set("model.vocab_size=-5"), "use 0 (from the tokenizer) or a positive size"),
    Case("vocab_smaller_than_tokenizer", _set("model.vocab_size=100"), "is smaller than the tokenizer's 258"),
    # meshes (8 simulated devices, tests/conftest.py)
    Case("mesh_axis_zero", _set("mesh.data=0"), "mesh.data=0: use a positive size or -1"),
    Case("mesh_two_rest_axes", _set("mesh.data=-1", "mesh.fsdp=-1"), "only one of mesh.data / mesh.fsdp"),
    Case("mesh_not_dividing_devices", _set("mesh.data=-1", "mesh.fsdp=3"), "does not divide 8 devices"),
    Case("mesh_more_than_devices", _set("mesh.data=16"), "needs 16 devices"),
    Case("mesh_not_dividing_batch", _set("mesh.data=8", "data.batch_size=4"), "micro-batch 4"),
    Case("heads_not_dividing_tensor_axis", _set("mesh.tensor=8"), "is not divisible by mesh.tensor=8"),
    Case("d_model_not_dividing_fsdp_axis", _set("mesh.fsdp=4", "model.d_model=66"),
         "model.d_model=66 is not divisible by mesh.fsdp=4"),
]
