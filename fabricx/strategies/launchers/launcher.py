"""The launcher interface: how the processes of a job come to exist."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class Launcher(ABC):
    """Starts the processes of a job and runs a function in each.

    Example::

        launcher.launch(train, fabric)
    """

    #: Whether ``launch`` needs a function (spawned processes cannot re-run the script).
    requires_function: bool = False

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the processes and run ``function(*args, **kwargs)``; return rank 0's result."""
