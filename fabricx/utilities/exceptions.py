"""Exception types fabricx raises on purpose."""


class FabricxError(RuntimeError):
    """Misuse of the fabricx API: the message says what was given and what to do instead."""


class MisconfigurationError(ValueError):
    """An invalid combination of flags or plugins, found when the objects are built."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written safely; the message names the file and the problem."""
