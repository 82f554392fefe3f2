"""The one exception type of the data layer."""
from __future__ import annotations

from edge_jax.errors import UserError


class DataError(UserError, ValueError):
    """A data problem the user can fix: a one-line message naming the problem and the fix."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
