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


class SetupError(FabricxError, ValueError):
    """An object given to ``setup*`` twice or of the wrong kind (a ``ValueError``, as in Lightning Fabric)."""


class LaunchError(FabricxError, TypeError):
    """``launch()`` called with something it cannot run (a ``TypeError``, as in Lightning Fabric)."""
