"""Errors a user can fix, each with a one-line message naming the problem and the fix."""
from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """Base of the errors whose message is a one-line fix for the user; the CLI prints it as
    ``edge-jax: error: ...`` with exit status 2 instead of a traceback."""


class ConfigError(UserError, ValueError):
    """A bad config: unknown key or value, or an impossible combination."""


def one_line(e: BaseException) -> str:
    """The first line of an exception's message (a KeyError's key unquoted), or "(no message)"."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    lines = text.strip().splitlines()
    return lines[0] if lines else "(no message)"


def unknown(kind: str, key: str, valid: Iterable[str]) -> str:
    """``unknown <kind> 'key'; did you mean ...?`` (or the valid names when none is close)."""
    valid = sorted(valid)
    near = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(repr(n) for n in near)}?" if near else (
        f"valid: {', '.join(valid[:12])}{' ...' if len(valid) > 12 else ''}")
    return f"unknown {kind} {key!r}; {hint}"


EXIT_PREEMPTED = 75  # sysexits' EX_TEMPFAIL: try again later (a job array or a requeue may retry on it)


class Preempted(BaseException):
    """SIGTERM stopped a run after it saved a checkpoint (not an Exception: nothing may treat it as a failed
    unit and go on); the CLI prints its one line and exits with :data:`EXIT_PREEMPTED`."""


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program stopped by Ctrl-C


class Interrupted(Preempted):
    """Ctrl-C (SIGINT) stopped a run after it saved a checkpoint, as SIGTERM does (:class:`Preempted`); the
    CLI prints its one line and exits with :data:`EXIT_INTERRUPTED`."""
