"""The context of one micro-batch of ``fabric.accumulate``: where it falls in its window, and no sync off a boundary."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from fabricx.fabric import Fabric


class AccumulationWindow:
    """What ``fabric.accumulate(model)`` returns: entering counts the micro-batch and, off a window's
    boundary, enters the strategy's ``no_backward_sync``.

    A class rather than a generator context manager: it is entered once per micro-batch, and a
    generator costs several times more per entry.
    """

    __slots__ = ("_boundary", "_epoch_length", "_fabric", "_module", "_sync")

    def __init__(self, fabric: Fabric, module: nn.Module, epoch_length: int | None) -> None:
        self._fabric = fabric
        self._module = module
        self._epoch_length = epoch_length
        self._boundary = True
        self._sync: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        fabric = self._fabric
        accumulation = fabric._accumulation
        steps = fabric._grad_accum_steps
        if steps == 1:
            accumulation.sync_gradients = True
            return
        accumulation.counter += 1
        if accumulation.counter == 1:
            accumulation.window_length = steps
            loader = accumulation.active_loader
            if loader is not None:
                with contextlib.suppress(TypeError):
                    length = self._epoch_length if self._epoch_length is not None else len(loader)
                    remaining = length - loader.batches_consumed + 1
                    if 0 < remaining < steps:
                        accumulation.window_length = remaining
        boundary = accumulation.counter >= accumulation.window_length
        self._boundary = boundary
        accumulation.sync_gradients = boundary
        accumulation.in_window = True
        if boundary:
            return
        try:
            sync = fabric._gradient_sync_off(self._module)
            if sync is not None:
                sync.__enter__()
        except BaseException:
            self._leave()
            raise
        self._sync = sync

    def __exit__(self, *exc_info: Any) -> bool | None:
        if self._fabric._grad_accum_steps == 1:
            return None
        sync, self._sync = self._sync, None
        try:
            return sync.__exit__(*exc_info) if sync is not None else None
        finally:
            self._leave()

    def _leave(self) -> None:
        accumulation = self._fabric._accumulation
        accumulation.in_window = False
        if self._boundary:
            accumulation.counter = 0
