"""Exception types fabricx raises on purpose."""


class FabricxError(RuntimeError):
    """Misuse of the fabricx API: the message says what was given and what to do instead."""


class MisconfigurationError(ValueError):
    """An invalid combination of flags or plugins, found when the objects are built."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written safely; the message names the file and the problem."""


class SetupError(FabricxError, ValueError):
    """An object given to ``setup*`` twice or of the wrong kind (a ``ValueError``, as in Lightning Fabric)."""


class LaunchError(FabricxError, TypeError):
    """``launch()`` called with something it cannot run (a ``TypeError``, as in Lightning Fabric)."""


class MisconfigurationException(MisconfigurationError):
    """Lightning's name for a misconfiguration: caught by ``except MisconfigurationException`` as in
    Lightning, and by ``except ValueError`` / ``MisconfigurationError`` as everywhere else in fabricx."""
