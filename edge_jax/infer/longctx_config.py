"""The long-context harness's keys (config section ``longctx``, :mod:`edge_jax.infer.longctx`).

Which method runs (``method``: "" is off, else a :data:`edge_jax.infer.kv_baselines.KV_METHODS`
name), on which prompts (``tasks``, ``lengths``, ``examples``, ``max_input``, and ``near_lengths``: an
optional second band of lengths, e.g. near the base's training window, scored apart as
``longctx/near/*`` so that ``longctx/overall`` stays the mean over ``lengths``), answered how
(``answer_tokens``, ``prefill_chunk``), and each baseline's own keys: ``budget`` (KV slots per
layer that StreamingLLM, SnapKV and PyramidKV keep; FullKV keeps all, and a method with its own
cache sizes reads them from its own keys), ``sink`` (StreamingLLM's sink tokens), ``obs_window``,
``pool_kernel`` (SnapKV, PyramidKV) and ``pyramid_beta`` (PyramidKV). The in-window check of a base
LM (``inwindow_*``: passkey and multikey prompts inside its training window, answered with its own
full attention) shares the tasks and ``answer_tokens``. A paper's method keeps its own keys in its
own section (e.g. EdgeInfinite's ``model.infini_*``).
"""
from __future__ import annotations

import dataclasses

from edge_jax.errors import ConfigError
from edge_jax.infer.kv_baselines import KV_METHODS
from edge_jax.registry import SECTIONS, Section

INWINDOW_TASKS = ("passkey", "multikey")  # the in-window check: single-needle and multi-key retrieval


@dataclasses.dataclass(frozen=True)
class LongctxKeys:
    method: str = ""  # "" (off) or a KV_METHODS name
    lengths: tuple = (1024, 2048, 4096, 8192, 16384)
    near_lengths: tuple = ()  # a second band, scored apart (longctx/near/*); (): none
    examples: int = 4
    tasks: tuple = ()  # (): all five categories
    budget: int = 0  # KV slots per layer of StreamingLLM, SnapKV, PyramidKV (required > 0 for them)
    sink: int = 4  # StreamingLLM's sink tokens (the first ones, always kept)
    obs_window: int = 8  # SnapKV / PyramidKV observation window
    pool_kernel: int = 7
    pyramid_beta: float = 20.0
    prefill_chunk: int = 1024
    max_input: int = 65536
    answer_tokens: int = 8
    inwindow_examples: int = 0  # > 0: after training, this many passkey and multikey prompts per inwindow length
    inwindow_lengths: tuple = (384, 500)  # characters (= byte tokens); + answer_tokens must fit data.seq_len


def _validate(c) -> None:
    lc = c.longctx
    if lc.inwindow_examples:
        _validate_inwindow(c)
    if not lc.method:
        return
    KV_METHODS.get(lc.method).validate(c, lc.budget)
    if not lc.lengths or min(lc.lengths) < 256 or max(lc.lengths) > lc.max_input:
        raise ConfigError(f"longctx.lengths={tuple(lc.lengths)} must be non-empty, each in [256, "
                          f"longctx.max_input={lc.max_input}]; raise max_input or drop the longer lengths")
    near = tuple(lc.near_lengths)
    if near and (min(near) < 256 or max(near) > lc.max_input or set(near) & set(lc.lengths)):
        raise ConfigError(f"longctx.near_lengths={near} must each lie in [256, longctx.max_input={lc.max_input}] "
                          f"and not among longctx.lengths={tuple(lc.lengths)} (each length is scored once)")
    if lc.examples <= 0 or lc.answer_tokens <= 0 or lc.prefill_chunk <= 0:
        raise ConfigError("longctx.examples, longctx.answer_tokens and longctx.prefill_chunk must be positive")


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


SECTIONS.register("longctx", Section("longctx", LongctxKeys, _validate,
                                     resumable=("longctx.method", "longctx.lengths", "longctx.near_lengths",
                                                "longctx.examples", "longctx.tasks", "longctx.inwindow_examples",
                                                "longctx.inwindow_lengths")))
