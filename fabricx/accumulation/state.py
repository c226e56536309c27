"""Where gradient accumulation stands: one object, shared by Fabric, its wrappers, loaders and checkpoints."""

from __future__ import annotations

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

    __slots__ = ("active_loader", "counter", "in_window", "sync_gradients", "window_length")

    def __init__(self) -> None:
        #: The fabricx loader that yielded the current batch (its epoch decides the last window's length).
        self.active_loader: Any = None
        self.sync_gradients = True
        self.in_window = False
        #: Micro-batches seen in the current window.
        self.counter = 0
        self.window_length = 1
