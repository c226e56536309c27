"""Where gradient accumulation stands: one object, shared by Fabric, its wrappers, loaders and checkpoints."""

from __future__ import annotations

import weakref
from typing import Any


class AccumulationState:
    """Whether the current micro-batch ends an accumulation window, and where the window stands.

    Fabric creates one and hands it to every object that needs it: the optimizer and scheduler
    wrappers (which step only when `sync_gradients`), the data loaders (which record themselves as
    `active_loader` so a window knows its epoch's length), the checkpoint entries (which save the
    position) and the Accelerate adapter.

    Example:
        ```python
        state = fabric.accumulation_state
        if state.sync_gradients:
            print("this micro-batch ends its window")
        ```
    """

    __slots__ = ("_active_loader", "counter", "in_window", "sync_gradients", "window_length")

    def __init__(self) -> None:
        # Weak: the loader holds this state, and a strong reference back would make the two a reference cycle,
        # which keeps the loader's iterator, and its worker processes, alive until a garbage collection ends
        # them (where torch waits 5 s for each worker, its queues already closed by the collector).
        self._active_loader: weakref.ref[Any] | None = None
        self.sync_gradients = True
        self.in_window = False
        #: Micro-batches seen in the current window.
        self.counter = 0
        self.window_length = 1

    @property
    def active_loader(self) -> Any:
        """The fabricx loader that yielded the current batch (its epoch decides the last window's length);
        ``None`` before the first batch or once that loader is gone."""
        ref = self._active_loader
        return None if ref is None else ref()

    @active_loader.setter
    def active_loader(self, loader: Any) -> None:
        self._active_loader = None if loader is None else weakref.ref(loader)

    def reset(self) -> None:
        """Forget a window in progress: the next micro-batch starts a new window (for a run abandoned mid-window
        in a process that then trains something else).

        Example:
            ```python
            fabric.accumulation_state.reset()
            ```
        """
        self.sync_gradients = True
        self.in_window = False
        self.counter = 0
        self.window_length = 1
