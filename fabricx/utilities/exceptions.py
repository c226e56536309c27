"""Exception types fabricx raises on purpose."""


class FabricxError(RuntimeError):
    """Misuse of the fabricx API: the message says what was given and what to do instead."""


class MisconfigurationException(Exception):
    """Lightning's exception for a misused Trainer, LightningModule or callback: a plain ``Exception``.

    Everything fabricx refuses as a misconfiguration is one (``MisconfigurationError`` is a subclass), so code
    written for Lightning that catches it keeps working.

    Example:
        ```python
        try:
            Trainer(max_epochs=-2)
        except MisconfigurationException as error:
            print(error)
        ```
    """


class MisconfigurationError(MisconfigurationException, ValueError):
    """An invalid combination of flags or plugins, found when the objects are built.

    Both Lightning's ``MisconfigurationException`` (what the Trainer side of Lightning raises) and a
    ``ValueError`` (what Lightning Fabric raises for its flags), so either ``except`` catches it.
    """


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written safely; the message names the file and the problem."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint at the path given: also the ``FileNotFoundError`` Lightning raises there.

    Example:
        ```python
        try:
            fabric.load("checkpoints/last")
        except FileNotFoundError:  # `except CheckpointError` catches it too
            start_afresh()
        ```
    """


class CheckpointWriteError(CheckpointError, OSError):
    """A checkpoint the file system refused to take (no space, no such folder): also an ``OSError`` with its
    ``errno``, as Lightning's save raises it."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno  # the message stays the whole text (no strerror, no filename)

    def __reduce__(self) -> tuple:
        # The errno travels too (an error of a spawned process reaches the parent pickled).
        return (type(self), (self.args[0] if self.args else "", self.errno))


class CheckpointPermissionError(CheckpointWriteError, PermissionError):
    """A checkpoint written where this process may not write (``EACCES``/``EPERM``): also a ``PermissionError``."""


class SetupError(FabricxError, ValueError):
    """An object given to ``setup*`` twice or of the wrong kind (a ``ValueError``, as in Lightning Fabric)."""


class LaunchError(FabricxError, TypeError):
    """``launch()`` called with something it cannot run (a ``TypeError``, as in Lightning Fabric)."""
