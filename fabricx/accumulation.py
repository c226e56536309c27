"""The context of one micro-batch of ``fabric.accumulate``: where it falls in its window, and no sync off a boundary."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from fabricx.fabric import Fabric


class AccumulationWindow:
    """What ``fabric.accumulate(model)`` returns: entering counts the micro-batch and, off a window's
    boundary, enters the strategy's ``no_backward_sync``.

    A class rather than a generator context manager, and one object reused for consecutive
    micro-batches of the same module: it is entered once per micro-batch, on the step's hot path.
    """

    __slots__ = (
        "_accumulation",
        "_active",
        "_boundary",
        "_fabric",
        "_module",
        "_steps",
        "_sync",
        "_sync_off",
        "epoch_length",
    )

    def __init__(self, fabric: Fabric, module: nn.Module) -> None:
        self._fabric = fabric
        # Weak: Fabric keeps the last window, and must not keep a model the user dropped alive.
        self._module: weakref.ref[Any] = weakref.ref(module)
        self._accumulation = fabric._accumulation
        self._steps = fabric._grad_accum_steps
        # One process: the strategy has no gradient sync to switch off.
        self._sync_off = not fabric._sync_is_noop
        self.epoch_length: int | None = None
        self._boundary = True
        self._active = False
        self._sync: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        accumulation = self._accumulation
        steps = self._steps
        if steps == 1:
            accumulation.sync_gradients = True
            return
        self._active = True
        counter = accumulation.counter = accumulation.counter + 1
        if counter == 1:
            accumulation.window_length = self._window_length(accumulation.active_loader)
        boundary = counter >= accumulation.window_length
        self._boundary = boundary
        accumulation.sync_gradients = boundary
        accumulation.in_window = True
        if boundary or not self._sync_off:
            return
        try:
            module = self._module()
            if module is None:
                raise ReferenceError("the model of this accumulate() context was deleted")
            sync = self._fabric._strategy.no_backward_sync(module._forward_module, True)
            sync.__enter__()
        except BaseException:
            self._leave()
            raise
        self._sync = sync

    def _window_length(self, loader: Any) -> int:
        """The accumulation steps, or fewer for the last window of the loader's epoch."""
        steps = self._steps
        if loader is None:
            return steps
        length = self.epoch_length
        if length is None:
            # A fabricx loader measured its epoch when it started; other loaders are asked.
            length = getattr(loader, "_epoch_batches", None)
        if length is None:
            try:
                length = len(loader)
            except TypeError:  # a loader without a length: every window is whole
                return steps
        remaining = length - loader.batches_consumed + 1
        return remaining if 0 < remaining < steps else steps

    def __exit__(self, *exc_info: Any) -> bool | None:
        if self._steps == 1:
            return None
        sync = self._sync
        if sync is None:  # _leave(), inlined: this runs for every micro-batch
            accumulation = self._accumulation
            accumulation.in_window = False
            self._active = False
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
        self._active = False
        if self._boundary:
            accumulation.counter = 0
