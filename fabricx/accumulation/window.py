"""The context of one micro-batch of ``fabric.accumulate``: where it falls in its window, and no sync off a boundary."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

from fabricx.accumulation.policies import EpochWindows

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn

    from fabricx.accumulation.state import AccumulationState


class AccumulationWindow(EpochWindows):
    """What ``fabric.accumulate(model)`` returns: entering counts the micro-batch (Fabric's epoch windows) and,
    off a window's boundary, enters the strategy's ``no_backward_sync``.

    A class rather than a generator context manager, and one object reused for consecutive
    micro-batches of the same module: it is entered once per micro-batch, on the step's hot path.
    """

    __slots__ = ("_accumulation", "_boundary", "_no_backward_sync", "_sync", "active", "module_ref")

    def __init__(
        self,
        state: AccumulationState,
        steps: int,
        module: nn.Module,
        no_backward_sync: Callable[[nn.Module, bool], contextlib.AbstractContextManager] | None,
    ) -> None:
        """`no_backward_sync` is the strategy's switch (`None` where one process has no sync to switch off)."""
        super().__init__(steps)
        # Weak: Fabric keeps the last window, and must not keep a model the user dropped alive.
        self.module_ref: weakref.ref[Any] = weakref.ref(module)
        self._accumulation = state
        self._no_backward_sync = no_backward_sync
        self._boundary = True
        self.active = False
        self._sync: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        boundary = self._accumulation.begin(self)
        if self.steps == 1:
            return
        self.active = True
        self._boundary = boundary
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

    def __exit__(self, *exc_info: Any) -> bool | None:
        if self.steps == 1:
            return None
        sync = self._sync
        if sync is None:  # _leave(), inlined: this runs for every micro-batch
            self.active = False
            self._accumulation.end(self._boundary)
            return None
        self._sync = None
        try:
            return sync.__exit__(*exc_info)
        finally:
            self._leave()

    def _leave(self) -> None:
        self.active = False
        self._accumulation.end(self._boundary)
