"""Where gradient accumulation stands: one object, shared by Fabric, its wrappers, loaders and checkpoints.

It changes only through its own transitions: `begin`/`end` of one micro-batch (a `WindowPolicy` decides where
windows end), `restore` from a checkpoint, `reset`, and `set_active_loader` from a loader.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class WindowPolicy(Protocol):
    """Where windows end (`fabricx.accumulation.policies`: Fabric's epoch windows, Accelerate's running count)."""

    @property
    def steps(self) -> int: ...  # micro-batches per window; 1: every micro-batch steps

    def window_length(self, state: AccumulationState) -> int: ...  # of the window starting now

    def ends_window(self, counter: int, window_length: int) -> bool: ...  # asked once per micro-batch, in order

    def loss_divisor(self, window_length: int) -> int: ...  # what Fabric.backward divides the loss by


class AccumulationState:
    """Whether the current micro-batch ends an accumulation window, and where the window stands.

    Fabric creates one and hands it to every object that needs it: the optimizer and scheduler
    wrappers (which step only when `sync_gradients`), the data loaders (which record themselves as
    `active_loader` so a window knows its epoch's length), the checkpoint entries (which save the
    position) and the Accelerate adapter. Read its fields anywhere; change them only through its methods.

    Example:
        ```python
        state = fabric.accumulation_state
        if state.sync_gradients:
            print("this micro-batch ends its window")
        ```
    """

    __slots__ = ("_active_loader", "counter", "in_window", "loss_divisor", "sync_gradients", "window_length")

    def __init__(self) -> None:
        # Weak: the loader holds this state, and a strong reference back would make the two a reference cycle,
        # which keeps the loader's iterator, and its worker processes, alive until a garbage collection ends
        # them (where torch waits 5 s for each worker, its queues already closed by the collector).
        self._active_loader: weakref.ref[Any] | None = None
        self.sync_gradients = True
        #: Inside a micro-batch of a window (between `begin` and `end`, more than one step per window).
        self.in_window = False
        #: Micro-batches seen in the current window.
        self.counter = 0
        self.window_length = 1
        #: What `Fabric.backward` divides the loss by now (1 outside a window).
        self.loss_divisor = 1

    @property
    def active_loader(self) -> Any:
        """The fabricx loader that yielded the current batch (its epoch decides the last window's length);
        ``None`` before the first batch or once that loader is gone."""
        ref = self._active_loader
        return None if ref is None else ref()

    def set_active_loader(self, loader: Any) -> None:
        """Record the loader that yielded the current batch (called by the loader as it hands a batch out)."""
        self._active_loader = None if loader is None else weakref.ref(loader)

    def begin(self, policy: WindowPolicy) -> bool:
        """Enter one micro-batch: count it and record whether it ends its window, as ``policy`` decides
        (Accelerate's ``GradientState._set_sync_gradients`` after its ``Accelerator._do_sync``). Returns that.

        Example:
            ```python
            boundary = state.begin(EpochWindows(steps=4))
            ...
            state.end(boundary)
            ```
        """
        if policy.steps == 1:  # every micro-batch steps: no window to stand in
            boundary = self.sync_gradients = policy.ends_window(1, 1)
            return boundary
        counter = self.counter = self.counter + 1
        if counter == 1:
            self.window_length = policy.window_length(self)
        length = self.window_length
        boundary = self.sync_gradients = policy.ends_window(counter, length)
        self.in_window = True
        self.loss_divisor = policy.loss_divisor(length)
        return boundary

    def end(self, boundary: bool) -> None:
        """Leave the micro-batch `begin` entered (``boundary``: what it returned); a window that ended starts over."""
        self.in_window = False
        self.loss_divisor = 1
        if boundary:
            self.counter = 0

    def restore(self, counter: int, window_length: int, sync_gradients: bool) -> None:
        """Take the position a checkpoint saved (between micro-batches)."""
        self.counter = counter
        self.window_length = window_length
        self.sync_gradients = sync_gradients

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
        self.loss_divisor = 1
