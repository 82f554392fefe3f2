"""The one exception type of the data layer."""


class DataError(ValueError):
    """A data problem the user can fix: a one-line message naming the problem and the fix."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
