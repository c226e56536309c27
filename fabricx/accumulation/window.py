"""The context of one micro-batch of ``fabric.accumulate``: where it falls in its window, and no sync off a boundary."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

    from fabricx.accumulation.state import AccumulationState


class AccumulationWindow:
    """What ``fabric.accumulate(model)`` returns: entering counts the micro-batch and, off a window's
    boundary, enters the strategy's ``no_backward_sync``.

    A class rather than a generator context manager, and one object reused for consecutive
    micro-batches of the same module: it is entered once per micro-batch, on the step's hot path.
    """

    __slots__ = (
        "_accumulation",
        "_boundary",
        "_no_backward_sync",
        "_sync",
        "active",
        "epoch_length",
        "module_ref",
        "steps",
    )

    def __init__(
        self,
        state: AccumulationState,
        steps: int,
        module: nn.Module,
        no_backward_sync: Callable[[nn.Module, bool], contextlib.AbstractContextManager] | None,
    ) -> None:
        """`no_backward_sync` is the strategy's switch (`None` where one process has no sync to switch off)."""
        # Weak: Fabric keeps the last window, and must not keep a model the user dropped alive.
        self.module_ref: weakref.ref[Any] = weakref.ref(module)
        self._accumulation = state
        self.steps = steps
        self._no_backward_sync = no_backward_sync
        self.epoch_length: int | None = None
        self._boundary = True
        self.active = False
        self._sync: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        accumulation = self._accumulation
        steps = self.steps
        if steps == 1:
            accumulation.sync_gradients = True
            return
        self.active = True
        counter = accumulation.counter = accumulation.counter + 1
        if counter == 1:
            accumulation.window_length = self._window_length(accumulation.active_loader)
        boundary = counter >= accumulation.window_length
        self._boundary = boundary
        accumulation.sync_gradients = boundary
        accumulation.in_window = True
        no_backward_sync = self._no_backward_sync
        if boundary or no_backward_sync is None:
            return
        try:
            module = self.module_ref()
            if module is None:
                raise ReferenceError("the model of this accumulate() context was deleted")
            sync = no_backward_sync(module._forward_module, True)
            sync.__enter__()
        except BaseException:
            self._leave()
            raise
        self._sync = sync

    def _window_length(self, loader: Any) -> int:
        """The accumulation steps, or fewer for the last window of the loader's epoch."""
        steps = self.steps
        if loader is None:
            return steps
        length = self.epoch_length
        if length is None:
            # A fabricx loader measured its epoch when it started; other loaders are asked.
            length = getattr(loader, "epoch_batches", None)
        if length is None:
            try:
                length = len(loader)
            except TypeError:  # a loader without a length: every window is whole
                return steps
        remaining = length - loader.batches_consumed + 1
        return remaining if 0 < remaining < steps else steps

    def __exit__(self, *exc_info: Any) -> bool | None:
        if self.steps == 1:
            return None
        sync = self._sync
        if sync is None:  # _leave(), inlined: this runs for every micro-batch
            accumulation = self._accumulation
            accumulation.in_window = False
            self.active = False
            if self._boundary:
                accumulation.counter = 0
            return None
        self._sync = None
        try:
            return sync.__exit__(*exc_info)
        finally:
            self._leave()

    def _leave(self) -> None:
        accumulation = self._accumulation
        accumulation.in_window = False
        self.active = False
        if self._boundary:
            accumulation.counter = 0
