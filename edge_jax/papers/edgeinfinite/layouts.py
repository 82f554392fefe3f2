"""Which prompt positions EdgeInfinite keeps where after prefill, and the tiny preset's prompt lengths
chosen from that so that every pair of Table 2's cells keeps different tokens.

Algorithm 1's prefill (:meth:`edge_jax.papers.edgeinfinite.inference.EdgeInfiniteSession.prefill`) of an
L-token prompt with ``s`` sink tokens, a window of ``w`` and segments of ``G`` tokens (Table 2's switches
make ``s`` or ``w`` 0; a window of 0 still keeps one token, so ``w' = max(w, 1)``):

    sink        positions 0 .. s-1, kept as KV cache (slots 0 .. s-1)
    compressed  N = (L - s - w') // G segments of G tokens from position s on, in order, folded into every
                layer's memory; none when L < s + w' + G (the prompt stays whole in the cache)
    local       positions s + N G .. L-1 (w' .. w' + G - 1 tokens when N > 0), kept as KV cache after the sink

:func:`kept_layout` writes that down (its test compares it with what the session's cache and memory
hold). Two cells of Table 2 compute differently on a prompt exactly when their layouts differ. With the
sink, dropping the window changes N only where (L - s - 1) mod G < w - 1; without the sink, where
(L - 1) mod G < w - 1. At the tiny sizes (s 32, w 32, G 128) those are L mod 128 in 33 .. 63 and 1 .. 31:
no length makes both window pairs differ, so the tiny preset mixes lengths from both residue bands
(:func:`table2_lengths`). Prompts come up to :data:`PROMPT_SLACK` characters shorter than asked, so a
length counts only when the claim holds for every prompt length in that range.
"""
from __future__ import annotations

import dataclasses
from itertools import combinations

# eval_prompts' prompts are 0 .. this many characters shorter than asked: the filler leaves less than its
# shortest sentence (11 characters + the joining space) unused (edge_jax.data.builders.longctx_tasks.fill)
PROMPT_SLACK = 11

# Table 2's cells as (keep_sink, keep_window): model.infini_keep_sink, model.infini_keep_window
TABLE2_SWITCHES = {"full": (True, True), "no_window": (True, False), "no_sink": (False, True),
                   "no_both": (False, False)}


@dataclasses.dataclass(frozen=True)
class KeptLayout:
    """Where the prompt positions of one prefill end up: ``sink`` and ``local`` are kept as KV cache
    (in that order), each range of ``compressed`` is one segment folded into the memory."""
    length: int
    sink: range
    compressed: tuple[range, ...]
    local: range

    @property
    def cached(self) -> tuple[int, ...]:
        """The prompt positions held in the KV cache, slot by slot."""
        return (*self.sink, *self.local)

    def describe(self) -> str:
        """E.g. ``32 + 15x128 + 159``: sink tokens, compressed segments x their length, local tokens."""
        seg = len(self.compressed[0]) if self.compressed else 0
        return f"{len(self.sink)} + {len(self.compressed)}x{seg} + {len(self.local)}"


def kept_layout(length: int, sink: int, window: int, segment: int, keep_sink: bool = True,
                keep_window: bool = True) -> KeptLayout:
    """The layout of a ``length``-token prompt (module docstring); the switches are Table 2's."""
    if length < 0 or sink < 0 or window < 0 or segment <= 0:
        raise ValueError(f"need length, sink, window >= 0 and segment > 0; got {length}, {sink}, {window}, {segment}")
    s = sink if keep_sink else 0
    w = max(window if keep_window else 0, 1)
    n = (length - s - w) // segment if length >= s + w + segment else 0
    s_kept = min(s, length)
    segments = tuple(range(s + i * segment, s + (i + 1) * segment) for i in range(n))
    return KeptLayout(length, range(s_kept), segments, range(s_kept + n * segment, length))


def prompt_lengths(length: int) -> range:
    """The token counts a prompt asked at ``length`` characters can have (byte tokens)."""
    return range(max(length - PROMPT_SLACK, 0), length + 1)


def window_matters(length: int, sink: int, window: int, segment: int, keep_sink: bool) -> bool:
    """Whether dropping the window changes the layout of every prompt asked at ``length``."""
    return all(kept_layout(n, sink, window, segment, keep_sink, True)
               != kept_layout(n, sink, window, segment, keep_sink, False) for n in prompt_lengths(length))


def window_length(target: int, sink: int, window: int, segment: int, keep_sink: bool = True) -> int | None:
    """The shortest length >= ``target`` at the top of a run of lengths where the window matters
    (:func:`window_matters`) with or without the sink, or None when no length has the whole slack range
    in such a run (a window of at most PROMPT_SLACK + 1). The top keeps the most tokens without the window
    (w - PROMPT_SLACK - 1 .. w - 1, the question's end among them at the tiny sizes)."""
    for length in range(target, target + 2 * segment + PROMPT_SLACK + 2):
        if window_matters(length, sink, window, segment, keep_sink) and not window_matters(
                length + 1, sink, window, segment, keep_sink):
            return length
    return None


def table2_lengths(targets, sink: int, window: int, segment: int) -> tuple:
    """For each target two lengths near it, where the window matters with the sink and where it matters
    without it (:func:`window_length`), sorted: with both, every pair of Table 2's cells keeps different
    tokens at one length or more of each target. ``targets`` unchanged when no such length exists."""
    picked = []
    for target in targets:
        both = [window_length(target, sink, window, segment, keep) for keep in (True, False)]
        if None in both:
            return tuple(targets)
        picked += both
    return tuple(sorted(set(picked)))


def alike_cells(length: int, sink: int, window: int, segment: int,
                switches: dict[str, tuple[bool, bool]] = TABLE2_SWITCHES) -> list[tuple[str, str]]:
    """The pairs of cells (by ``switches``: name -> (keep_sink, keep_window)) that keep the same tokens
    for some prompt asked at ``length`` (any length of its slack range)."""
    return [(a, b) for a, b in combinations(switches, 2)
            if any(kept_layout(n, sink, window, segment, *switches[a]) == kept_layout(n, sink, window, segment,
                                                                                       *switches[b])
                   for n in prompt_lengths(length))]
