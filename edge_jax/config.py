"""Config schema, loading (big_vision style ``file.py:arg``), overrides and validation.

Every error raised here is a :class:`ConfigError` whose message is one line naming the
problem and the fix.
"""
from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from typing import Any, Iterable, Mapping

import ml_collections

SCHEDULES = ("cosine", "wsd", "wsdc", "constant")
DTYPES = ("float32", "bfloat16")
FFN_KINDS = ("swiglu", "relu2", "relu", "gelu")
ATTENTION_KINDS = ("gqa", "mla")
MEMORY_KINDS = ("none", "meki", "ple", "engram")
MEKI_PROJECTIONS = ("swiglu", "linear")
MEKI_FUSIONS = ("add_sigmoid", "mul_sigmoid", "add_silu", "mul_silu")
MEKI_POSITIONS = ("parallel_ffn", "parallel_attn", "after_attn", "after_ffn")
MEMORY_UPDATES = ("linear", "delta")
LONGCTX_METHODS = ("", "edgeinfinite", "fullkv", "streamingllm", "snapkv", "pyramidkv")
TRAINABLE = ("all", "memory_gate")
MOE_STRATEGIES = ("dropless", "ragged", "uniform", "npumoe")
MOE_DROPS = ("saliency", "position")


class ConfigError(ValueError):
    """A bad config: unknown key or value, or an impossible combination."""


def base_config() -> ml_collections.ConfigDict:
    """The full schema with defaults; every valid key appears here."""
    c = ml_collections.ConfigDict()
    c.seed = 0

    c.model = ml_collections.ConfigDict(dict(
        vocab_size=0,  # 0: take it from the tokenizer
        d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=384,
        rope_theta=500_000.0, qk_norm=True, tie_embeddings=True, norm_eps=1e-6,
        ffn="swiglu", dtype="float32", param_dtype="float32", init_std=0.02,
        # Attention: gqa (MHA when n_kv_heads == n_heads) or mla (PLM / DeepSeek-V2 latent attention:
        # head_dim is d_nope and the value width, kv_lora_rank is d_c, q_lora_rank 0 = full-rank query;
        # mla_absorb decodes in the latent space).
        attention="gqa", kv_lora_rank=0, q_lora_rank=0, d_rope=0, mla_absorb=False,
        # Token-indexed memory beside the transformer (MeKi, or the PLE / Engram baselines).
        memory="none", d_mem=0,  # d_mem: MeKi memory width, PLE per-layer width, Engram per-head width
        meki_static=True, meki_dynamic=True, meki_projection="swiglu", meki_fusion="add_sigmoid",
        meki_position="parallel_ffn", meki_folded=False,
        engram_layers=(1,), engram_orders=(2, 3), engram_heads=4, engram_table_size=4099,
        engram_kernel=4,
        # EdgeInfinite: memory-gating MLP width per head (0: off), initial gate logit, the segmented
        # layout (sink tokens, window tokens, segment length), memory update rule and epsilon; the
        # keep switches drop the sink or window tokens at inference (EdgeInfinite Table 2).
        infini_hidden=0, infini_gate_init=0.0, infini_sink=0, infini_window=0, infini_segment=0,
        infini_update="linear", infini_eps=1e-6, infini_keep_sink=True, infini_keep_window=True,
        # NPUMoE: a top-k router over SwiGLU experts in place of the FFN (moe_experts 0: dense FFN) in
        # moe_layers (empty: all); moe_d_ff 0 takes d_ff; a Switch load-balancing loss of moe_aux_weight.
        moe_experts=0, moe_top_k=2, moe_d_ff=0, moe_renormalize=False, moe_layers=(), moe_aux_weight=0.0,
    ))
    c.data = ml_collections.ConfigDict(dict(
        name="pystdlib", tokenizer="byte", seq_len=128, batch_size=16, data_dir="",
        text_key="text", facts_entities=2000, longctx_length=4096, longctx_examples=200,
    ))
    c.train = ml_collections.ConfigDict(dict(
        steps=200, lr=3e-3, min_lr=3e-4, warmup_steps=20, schedule="cosine",
        decay_fraction=0.2, tail_fraction=0.1, b1=0.9, b2=0.95, eps=1e-8,
        weight_decay=0.1, clip_norm=1.0, grad_accum=1,
        log_every=10, eval_every=50, eval_batches=20, ckpt_every=50, keep_ckpts=3,
        qa_questions=0,  # after training, exact match on this many questions (-1: all; needs facts/longctx)
        sparsity_batches=0,  # after training, PLM Algorithm 1 on this many validation batches (0: off)
        trainable="all",  # or memory_gate: only EdgeInfinite's memory-gating module (needs init_from)
        gate_lr=0.0,  # learning rate of the gate logits g (0: train.lr); no weight decay on them
    ))
    # Start from the params of another run's latest checkpoint (a training workdir); params the
    # model has and the checkpoint lacks (EdgeInfinite's memory gate) keep their initialisation.
    c.init_from = ""
    # After training: exact match on the built-in long-context tasks with one inference method.
    c.longctx = ml_collections.ConfigDict(dict(
        method="",  # "" (off), edgeinfinite, fullkv, streamingllm, snapkv, pyramidkv
        lengths=(1024, 2048, 4096, 8192, 16384), examples=4, tasks=(),  # tasks (): all five
        budget=0,  # KV slots per layer for the baselines (0: sink + window + segment, EdgeInfinite's most)
        obs_window=8, pool_kernel=7, pyramid_beta=20.0,  # SnapKV / PyramidKV
        prefill_chunk=1024, max_input=65536, answer_tokens=8,
    ))
    # How the MoE layers execute (NPUMoE §4; edge_jax.moe): dropless and ragged are exact; uniform gives
    # every expert `capacity` rows per prefill chunk (0: the calibrated busiest estimate I * base);
    # npumoe uses the calibrated plan: static tiers (tier_multipliers x base), groups of `group`
    # same-tier experts per call, and with residency the least popular experts on the exact fallback
    # path. `plan`: a calibration file (edge-jax moe calibrate); empty with train.steps=0 calibrates on
    # calib_batches training batches first. Overflow is dropped by saliency (or by position).
    c.moe = ml_collections.ConfigDict(dict(
        strategy="dropless", chunk=512, drop="saliency", capacity=0, group=1, tiers=True, residency=False,
        tier_multipliers=(0.5, 1.0, 2.0, 4.0), hot_fraction=0.5, plan="", calib_batches=8, time_batches=2,
    ))
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    return c


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parse a ``get_config`` argument like ``"size=tiny,runlocal"`` against typed defaults."""
    out = ml_collections.ConfigDict(dict(defaults))
    if not arg:
        return out
    for item in arg.split(","):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ConfigError(_unknown("config argument", key, defaults))
        out[key] = _coerce(raw if _ else "True", defaults[key], key)
    return out


def _unknown(kind: str, key: str, valid: Iterable[str]) -> str:
    valid = sorted(valid)
    near = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(n) for n in near)}?" if near else (
        f"valid: {', '.join(valid[:12])}{' ...' if len(valid) > 12 else ''}")
    return f"unknown {kind} {key!r}; {hint}"


def _coerce(raw: Any, current: Any, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    if isinstance(current, bool):
        low = raw.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"config key {key!r} needs true/false, got {raw!r}")
    if isinstance(current, (int, float)) and not isinstance(current, bool):
        try:
            val = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            raise ConfigError(f"config key {key!r} needs a number, got {raw!r}") from None
        if isinstance(current, int) and isinstance(val, float) and not val.is_integer():
            raise ConfigError(f"config key {key!r} needs an integer, got {raw!r}")
        return type(current)(val)
    if isinstance(current, (tuple, list)):
        try:
            return type(current)(ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            raise ConfigError(f"config key {key!r} needs a list like [1,2], got {raw!r}") from None
    return raw


def flatten(c, prefix: str = "") -> dict:
    """``{"train.steps": 200, ...}`` from a nested ConfigDict or dict."""
    out = {}
    for k, v in c.items():
        nested = isinstance(v, (Mapping, ml_collections.ConfigDict))
        out.update(flatten(v, f"{prefix}{k}.") if nested else {f"{prefix}{k}": v})
    return out


def apply_overrides(c: ml_collections.ConfigDict, overrides: Mapping[str, Any] | Iterable[str]):
    """Apply ``{"train.steps": 200}`` or ``["train.steps=200"]`` in place; unknown keys fail."""
    if not isinstance(overrides, Mapping):
        pairs = {}
        for item in overrides:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"override {item!r} needs the form key=value")
            pairs[key.strip()] = raw
        overrides = pairs
    valid = list(flatten(c))
    for key, raw in overrides.items():
        if key not in valid:
            raise ConfigError(_unknown("config key", key, valid))
        *path, leaf = key.split(".")
        node = c
        for p in path:
            node = node[p]
        node[leaf] = _coerce(raw, node[leaf], key)
    return c


def load_config(spec: str, overrides: Mapping[str, Any] | Iterable[str] = ()) -> ml_collections.ConfigDict:
    """Load ``path/to/config.py[:arg]``, apply overrides, validate, and return it."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass e.g. --config configs/lm.py:size=tiny")
    mod_spec = importlib.util.spec_from_file_location(f"_edge_jax_cfg_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path!r} defines no get_config(arg); add one")
    c = module.get_config(arg or None)
    apply_overrides(c, overrides)
    if is_cache_sim(c):
        from edge_jax.papers.expert_cache.config import validate as validate_cache_sim
        validate_cache_sim(c)
    else:
        validate(c)
    return c


def is_cache_sim(c) -> bool:
    """Whether ``c`` is an expert-cache simulation config (edge_jax.papers.expert_cache.config), not an LM one."""
    return c.get("task", "") == "cache_sim"


def schema_defaults(c) -> ml_collections.ConfigDict:
    """The schema ``c`` follows, at its defaults."""
    if is_cache_sim(c):
        from edge_jax.papers.expert_cache.config import base_config as cache_sim_config
        return cache_sim_config()
    return base_config()


def _choice(key: str, value: str, valid: Iterable[str]):
    if value not in valid:
        raise ConfigError(_unknown(f"{key} value", value, valid))


def validate(c: ml_collections.ConfigDict) -> None:
    """Check values and combinations; raise a one-line ConfigError naming the conflict."""
    m, d, t = c.model, c.data, c.train
    _choice("train.schedule", t.schedule, SCHEDULES)
    _choice("model.dtype", m.dtype, DTYPES)
    _choice("model.param_dtype", m.param_dtype, DTYPES)
    _choice("model.ffn", m.ffn, FFN_KINDS)
    positive = {"model.d_model": m.d_model, "model.n_layers": m.n_layers, "model.n_heads": m.n_heads,
                "model.n_kv_heads": m.n_kv_heads, "model.head_dim": m.head_dim, "model.d_ff": m.d_ff,
                "data.seq_len": d.seq_len, "data.batch_size": d.batch_size, "train.steps": t.steps,
                "train.grad_accum": t.grad_accum, "train.lr": t.lr}
    if t.steps == 0 and c.init_from:
        positive.pop("train.steps")  # evaluate another run's params without training
    for key, val in positive.items():
        if val <= 0:
            raise ConfigError(f"{key} must be positive, got {val}")
    if m.n_heads % m.n_kv_heads:
        raise ConfigError(f"model.n_heads={m.n_heads} is not a multiple of model.n_kv_heads={m.n_kv_heads}; "
                          "pick n_kv_heads dividing n_heads")
    if m.head_dim % 2:
        raise ConfigError(f"model.head_dim={m.head_dim} must be even for RoPE")
    if d.batch_size % t.grad_accum:
        raise ConfigError(f"data.batch_size={d.batch_size} is not divisible by train.grad_accum={t.grad_accum}")
    if not 0 <= t.min_lr <= t.lr:
        raise ConfigError(f"train.min_lr={t.min_lr} must lie in [0, train.lr={t.lr}]")
    if not 0 <= t.sparsity_batches <= t.eval_batches:
        raise ConfigError(f"train.sparsity_batches={t.sparsity_batches} must lie in [0, train.eval_batches="
                          f"{t.eval_batches}]; it uses the first validation batches")
    if t.steps and t.warmup_steps >= t.steps and t.schedule != "constant":
        raise ConfigError(f"train.warmup_steps={t.warmup_steps} must be below train.steps={t.steps}")
    if t.schedule in ("wsd", "wsdc"):
        tail = t.tail_fraction if t.schedule == "wsdc" else 0.0
        if not (0 < t.decay_fraction and t.decay_fraction + tail < 1 and tail >= 0):
            raise ConfigError(f"train.decay_fraction={t.decay_fraction} and train.tail_fraction={t.tail_fraction} "
                              "must be >= 0 and sum to less than 1")
    for axis in ("data", "fsdp", "tensor"):
        if c.mesh[axis] == 0 or c.mesh[axis] < -1:
            raise ConfigError(f"mesh.{axis}={c.mesh[axis]}: use a positive size or -1 for 'the rest'")
    if sum(c.mesh[a] == -1 for a in ("data", "fsdp", "tensor")) > 1:
        raise ConfigError("only one of mesh.data / mesh.fsdp / mesh.tensor may be -1")
    _validate_attention(m)
    _validate_memory(m)
    _validate_infini(c)
    _validate_moe(c)
    if m.vocab_size < 0:
        raise ConfigError(f"model.vocab_size={m.vocab_size}: use 0 (from the tokenizer) or a positive size")


def _validate_attention(m) -> None:
    _choice("model.attention", m.attention, ATTENTION_KINDS)
    if m.attention != "mla":
        return
    if m.kv_lora_rank <= 0:
        raise ConfigError(f"model.kv_lora_rank={m.kv_lora_rank} (d_c) must be positive with model.attention=mla; "
                          "set e.g. model.kv_lora_rank=64")
    if m.d_rope <= 0 or m.d_rope % 2:
        raise ConfigError(f"model.d_rope={m.d_rope} must be positive and even for RoPE with model.attention=mla; "
                          "set e.g. model.d_rope=16")
    if m.q_lora_rank < 0:
        raise ConfigError(f"model.q_lora_rank={m.q_lora_rank} must be 0 (full-rank query) or positive")
    if m.qk_norm:
        raise ConfigError("model.qk_norm applies to GQA only (MLA normalises its latent); "
                          "set model.qk_norm=false with model.attention=mla")


def _validate_memory(m) -> None:
    _choice("model.memory", m.memory, MEMORY_KINDS)
    if m.memory == "none":
        return
    if m.d_mem <= 0:
        raise ConfigError(f"model.d_mem={m.d_mem} must be positive with model.memory={m.memory!r}; "
                          "set e.g. model.d_mem=64")
    if m.memory == "meki":
        _choice("model.meki_projection", m.meki_projection, MEKI_PROJECTIONS)
        _choice("model.meki_fusion", m.meki_fusion, MEKI_FUSIONS)
        _choice("model.meki_position", m.meki_position, MEKI_POSITIONS)
        if not (m.meki_static or m.meki_dynamic or m.meki_folded):
            raise ConfigError("model.meki_static and model.meki_dynamic are both off, so MeKi has no memory; "
                              "switch one on or set model.memory=none")
    if m.memory == "engram":
        bad = [i for i in m.engram_layers if not 0 <= i < m.n_layers]
        if not m.engram_layers or bad:
            raise ConfigError(f"model.engram_layers={tuple(m.engram_layers)} must be non-empty layer indices "
                              f"in [0, {m.n_layers}); e.g. model.engram_layers=[1]")
        if not m.engram_orders or min(m.engram_orders) < 2:
            raise ConfigError(f"model.engram_orders={tuple(m.engram_orders)} must list n-gram orders >= 2, "
                              "e.g. [2,3]")
        if m.engram_heads <= 0 or m.engram_table_size < 2 or m.engram_kernel <= 0:
            raise ConfigError("model.engram_heads, model.engram_kernel must be positive and "
                              "model.engram_table_size >= 2")


def moe_needs_calibration(c) -> bool:
    """Whether the MoE execution needs calibrated expert loads (npumoe, or uniform at capacity 0)."""
    return c.model.moe_experts > 0 and (c.moe.strategy == "npumoe" or (c.moe.strategy == "uniform"
                                                                       and not c.moe.capacity))


def _validate_moe(c) -> None:
    m, x = c.model, c.moe
    _choice("moe.strategy", x.strategy, MOE_STRATEGIES)
    _choice("moe.drop", x.drop, MOE_DROPS)
    if m.moe_experts < 0 or m.moe_d_ff < 0:
        raise ConfigError("model.moe_experts and model.moe_d_ff must be >= 0 (moe_experts 0: a dense FFN)")
    if not m.moe_experts:
        if x.strategy != "dropless":
            raise ConfigError(f"moe.strategy={x.strategy!r} applies to MoE models; set model.moe_experts > 0")
        return
    if not 1 <= m.moe_top_k <= m.moe_experts:
        raise ConfigError(f"model.moe_top_k={m.moe_top_k} must lie in [1, model.moe_experts={m.moe_experts}]; "
                          "lower the top-k or add experts")
    if any(not 0 <= i < m.n_layers for i in m.moe_layers) or len(set(m.moe_layers)) != len(m.moe_layers):
        raise ConfigError(f"model.moe_layers={tuple(m.moe_layers)} must be distinct layer indices in [0, "
                          f"{m.n_layers}); empty means every layer")
    if x.chunk <= 0 or x.group <= 0 or x.capacity < 0 or x.calib_batches <= 0 or x.time_batches < 0:
        raise ConfigError("moe.chunk, moe.group and moe.calib_batches must be positive, moe.capacity and "
                          "moe.time_batches >= 0")
    if not 0 < x.hot_fraction <= 1 or not x.tier_multipliers or min(x.tier_multipliers) <= 0:
        raise ConfigError(f"moe.hot_fraction={x.hot_fraction} must lie in (0, 1] and moe.tier_multipliers="
                          f"{tuple(x.tier_multipliers)} must be positive numbers")
    if moe_needs_calibration(c) and not x.plan and c.train.steps:
        raise ConfigError(f"moe.strategy={x.strategy!r} needs calibrated expert loads before training: set "
                          "moe.plan=<calibration.json> (edge-jax moe calibrate), or evaluate a trained run with "
                          "train.steps=0 init_from=<workdir>, which calibrates first")


def longctx_budget(c) -> int:
    """KV slots per layer for the long-context baselines (longctx.budget, or EdgeInfinite's most)."""
    m = c.model
    return c.longctx.budget or m.infini_sink + m.infini_window + m.infini_segment


def _validate_infini(c) -> None:
    m, t, lc = c.model, c.train, c.longctx
    _choice("train.trainable", t.trainable, TRAINABLE)
    _choice("longctx.method", lc.method, LONGCTX_METHODS)
    if m.infini_hidden < 0:
        raise ConfigError(f"model.infini_hidden={m.infini_hidden} must be >= 0 (0: no EdgeInfinite memory gate)")
    if m.infini_hidden:
        _choice("model.infini_update", m.infini_update, MEMORY_UPDATES)
        if m.attention != "gqa":
            raise ConfigError("EdgeInfinite (model.infini_hidden > 0) needs model.attention=gqa")
        if m.infini_segment <= 0 or m.infini_sink < 0 or m.infini_window < 0:
            raise ConfigError(f"model.infini_segment={m.infini_segment} must be positive and infini_sink, "
                              "infini_window >= 0; set e.g. model.infini_segment=128")
        if m.infini_segment < m.infini_window:
            raise ConfigError(f"model.infini_segment={m.infini_segment} is shorter than model.infini_window="
                              f"{m.infini_window}; use a segment at least as long as the window")
    if t.trainable == "memory_gate" and not (m.infini_hidden and c.init_from):
        raise ConfigError("train.trainable=memory_gate trains EdgeInfinite's gate on a frozen base: set "
                          "model.infini_hidden > 0 and init_from=<base workdir>")
    if t.steps == 0 and not c.init_from:
        raise ConfigError("train.steps=0 only evaluates another run: set init_from=<workdir> or train.steps > 0")
    if lc.method:
        if lc.method == "edgeinfinite" and not m.infini_hidden:
            raise ConfigError("longctx.method=edgeinfinite needs the memory gate: set model.infini_hidden > 0")
        if m.infini_segment <= 0:
            raise ConfigError("longctx.method needs the cache sizes: set model.infini_sink, infini_window and "
                              "infini_segment (StreamingLLM keeps infini_sink sink tokens)")
        budget = longctx_budget(c)
        if m.infini_sink + m.infini_window >= budget:
            raise ConfigError(f"model.infini_sink + infini_window = {m.infini_sink + m.infini_window} leave nothing "
                              f"of the cache budget longctx.budget={budget}; raise the budget or shrink them")
        if lc.method in ("snapkv", "pyramidkv") and not 0 < lc.obs_window < budget:
            raise ConfigError(f"longctx.obs_window={lc.obs_window} must lie in [1, budget {budget}); e.g. 8")
        if lc.pool_kernel <= 0 or lc.pool_kernel % 2 == 0:
            raise ConfigError(f"longctx.pool_kernel={lc.pool_kernel} must be a positive odd number, e.g. 7")
        if not lc.lengths or min(lc.lengths) < 256 or max(lc.lengths) > lc.max_input:
            raise ConfigError(f"longctx.lengths={tuple(lc.lengths)} must be non-empty, each in [256, "
                              f"longctx.max_input={lc.max_input}]; raise max_input or drop the longer lengths")
        if lc.examples <= 0 or lc.answer_tokens <= 0 or lc.prefill_chunk <= 0:
            raise ConfigError("longctx.examples, longctx.answer_tokens and longctx.prefill_chunk must be positive")
