"""EdgeInfinite's ``longctx.*`` keys: after training, exact match on the built-in long-context tasks
with one inference method (``longctx.method``, :data:`edge_jax.infer.kv_methods.KV_METHODS`; ""
is off), and the in-window check of a base LM (``longctx.inwindow_*``: passkey and multikey
prompts that fit its training window, answered with full attention). The memory's own keys
(``model.infini_*``) sit beside the attention kinds (:mod:`edge_jax.layers.attention.kinds`).
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.infer.kv_methods import KV_METHODS
from edge_jax.registry import SECTIONS, Section


@dataclasses.dataclass(frozen=True)
class LongctxKeys:
    method: str = ""  # "" (off) or a KV_METHODS name
    lengths: tuple = (1024, 2048, 4096, 8192, 16384)
    examples: int = 4
    tasks: tuple = ()  # (): all five categories
    budget: int = 0  # KV slots per layer for the baselines (0: sink + window + segment, EdgeInfinite's most)
    obs_window: int = 8  # SnapKV / PyramidKV observation window
    pool_kernel: int = 7
    pyramid_beta: float = 20.0
    prefill_chunk: int = 1024
    max_input: int = 65536
    answer_tokens: int = 8
    inwindow_examples: int = 0  # > 0: after training, this many passkey and multikey prompts per inwindow length
    inwindow_lengths: tuple = (384, 500)  # characters (= byte tokens); + answer_tokens must fit data.seq_len


def longctx_budget(c) -> int:
    """KV slots per layer for the long-context baselines (longctx.budget, or EdgeInfinite's most)."""
    m = c.model
    return c.longctx.budget or m.infini_sink + m.infini_window + m.infini_segment


def _validate(c) -> None:
    m, t, lc = c.model, c.train, c.longctx
    if "memory_gate" in t.trainable and not (m.infini_hidden and c.init_from):
        raise ConfigError(f"train.trainable={t.trainable!r} trains EdgeInfinite's gate on a frozen base: set "
                          "model.infini_hidden > 0 and init_from=<base workdir>")
    if lc.inwindow_examples:
        _validate_inwindow(c)
    if not lc.method:
        return
    method = KV_METHODS.get(lc.method)
    if m.infini_segment <= 0:
        raise ConfigError("longctx.method needs the cache sizes: set model.infini_sink, infini_window and "
                          "infini_segment (StreamingLLM keeps infini_sink sink tokens)")
    budget = longctx_budget(c)
    if m.infini_sink + m.infini_window >= budget:
        raise ConfigError(f"model.infini_sink + infini_window = {m.infini_sink + m.infini_window} leave nothing "
                          f"of the cache budget longctx.budget={budget}; raise the budget or shrink them")
    method.validate(c, budget)
    if lc.pool_kernel <= 0 or lc.pool_kernel % 2 == 0:
        raise ConfigError(f"longctx.pool_kernel={lc.pool_kernel} must be a positive odd number, e.g. 7")
    if not lc.lengths or min(lc.lengths) < 256 or max(lc.lengths) > lc.max_input:
        raise ConfigError(f"longctx.lengths={tuple(lc.lengths)} must be non-empty, each in [256, "
                          f"longctx.max_input={lc.max_input}]; raise max_input or drop the longer lengths")
    if lc.examples <= 0 or lc.answer_tokens <= 0 or lc.prefill_chunk <= 0:
        raise ConfigError("longctx.examples, longctx.answer_tokens and longctx.prefill_chunk must be positive")


INWINDOW_TASKS = ("passkey", "multikey")  # the in-window check: single-needle and multi-key retrieval


def _validate_inwindow(c) -> None:
    from edge_jax.data.builders.longctx_tasks import min_length
    lc = c.longctx
    shortest = max(min_length(t) for t in INWINDOW_TASKS)
    longest = c.data.seq_len - lc.answer_tokens
    if lc.inwindow_examples < 0 or not lc.inwindow_lengths or not all(
            shortest <= n <= longest for n in lc.inwindow_lengths):
        raise ConfigError(f"longctx.inwindow_lengths={tuple(lc.inwindow_lengths)} (with longctx.inwindow_examples="
                          f"{lc.inwindow_examples} >= 0) must be non-empty, each in [{shortest}, data.seq_len - "
                          f"longctx.answer_tokens = {longest}] (the prompts must fit the training window)")
    if c.model.infini_hidden:
        raise ConfigError("longctx.inwindow_examples checks a base LM with full attention; set it to 0 for a run "
                          "with EdgeInfinite's memory (model.infini_hidden > 0)")


PROMPT_SLACK = 11  # eval_prompts' prompts are 0 .. this many characters shorter than asked (filler granularity)


def window_lengths(targets, sink: int, window: int, segment: int) -> tuple:
    """For each target, the shortest prompt length >= it at which EdgeInfinite's window matters: every
    prompt of that length (down to PROMPT_SLACK shorter) compresses one more segment without the window
    tokens (``infini_keep_window=false`` keeps 1 token after the segments) than with them, so Table 2's
    no_window keeps less. With the window the last 129 .. window + segment - 1 tokens stay as KV cache;
    the length is the top of that band, (L - sink - 1) % segment == window - 2, which keeps the most
    tokens (window - PROMPT_SLACK - 2 .. window - 1) without it. Returns ``targets`` unchanged when the
    window is shorter than the slack (no length works for every prompt)."""
    if window - 2 < PROMPT_SLACK or segment <= 0:
        return tuple(targets)
    return tuple(t + (window - 2 - (t - sink - 1)) % segment for t in targets)


GATE = ".*memory_gate.*"  # the memory-gating modules' param paths


def _upgrade(flat: dict) -> None:
    """Workdirs before trainable patterns: ``train.trainable=memory_gate`` and ``train.gate_lr``
    (the gate logits' own learning rate) become a pattern and a multiplier of ``train.lr``."""
    if flat.get("train.trainable") == "memory_gate":
        flat["train.trainable"] = GATE
    gate_lr = flat.pop("train.gate_lr", 0.0)
    if gate_lr:
        flat["train.lr_multipliers"] = [f".*memory_gate/g={gate_lr / flat['train.lr']!r}"]


SECTIONS.register("longctx", Section("longctx", LongctxKeys, _validate, upgrade=_upgrade,
                                     resumable=("longctx.method", "longctx.lengths", "longctx.examples",
                                                "longctx.tasks", "longctx.inwindow_examples",
                                                "longctx.inwindow_lengths")))
