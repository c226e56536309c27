"""Let training go on while an asynchronous save copies the optimizer's tensors; hold only the next step.

Most of a training state is the parameters and the optimizer state (Adam: 3x the weights), and the
only thing in a training loop that changes them in place is ``optimizer.step()``. An asynchronous
save therefore copies those tensors in its background thread, and a global optimizer step pre-hook
(installed once) holds any ``optimizer.step()`` until that copy is finished: forward and backward of
the next micro-batches run meanwhile. Everything else in the state (buffers such as BatchNorm
statistics, gradients, RNG states, values) is copied before the save returns.

Every deferred tensor's version counter is recorded at the save call and checked after its copy: a
tensor changed in place by something other than ``optimizer.step()`` in between (for example
``param.add_(...)`` by hand) makes the save fail with a `CheckpointError` instead of storing
a mixed state. (Writes through ``param.data`` bypass the version counter; call
`fabricx.checkpoint.background.AsyncSave.wait_staged()` first, or switch deferral off with
`defer_optimizer_tensors()`.)

Example:
    ```python
    guard = StagingGuard()   # from now on, optimizer.step() waits
    guard.release()          # background thread, once the copies are done
    ```
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import torch
from torch.optim import Optimizer

__all__ = ["StagingGuard", "defer_optimizer_tensors", "guarded_storages"]

_lock = threading.Lock()
_active: StagingGuard | None = None
_hook_installed = False
_enabled = True


def defer_optimizer_tensors(enabled: bool) -> None:
    """Whether asynchronous saves copy parameters and optimizer state in the background, holding the next
    ``optimizer.step()`` until done (default ``True``); ``False`` copies everything before the save returns.

    Example:
        ```python
        # e.g. a loop that changes weights in place outside optimizer.step()
        defer_optimizer_tensors(False)
        ```
    """
    global _enabled
    _enabled = bool(enabled)


def guarded_storages(objects: Iterable[Any]) -> frozenset[tuple[str, int]]:
    """The memory (device, storage address) of the parameters and state tensors of the optimizers among
    ``objects`` (fabricx wrappers are looked through); empty when deferral is switched off."""
    if not _enabled:
        return frozenset()
    found: set[tuple[str, int]] = set()
    for obj in objects:
        inner = getattr(obj, "_fabricx_unwrapped", obj)
        if not isinstance(inner, Optimizer):
            continue
        tensors = [param for group in inner.param_groups for param in group["params"]]
        for entry in inner.state.values():
            values = entry.values() if isinstance(entry, dict) else [entry]
            tensors += [value for value in values if torch.is_tensor(value)]
        for tensor in tensors:
            if tensor.layout == torch.strided and tensor.device.type != "meta":
                found.add(storage_key(tensor))
    return frozenset(found)


def storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return (str(tensor.device), tensor.untyped_storage().data_ptr())


class StagingGuard:
    """Holds every ``optimizer.step()`` of this process until `release()` (one guard at a time)."""

    def __init__(self) -> None:
        global _active
        self._done = threading.Event()
        self.waited_s = 0.0
        _install_hook()
        with _lock:
            _active = self

    def wait(self, timeout: float | None = None, *, record: bool = False) -> bool:
        """Wait for `release()`; ``record``: add the time waited to `waited_s` (a held step)."""
        if self._done.is_set():
            return True
        start = time.perf_counter()
        done = self._done.wait(timeout)
        if record:
            self.waited_s += time.perf_counter() - start
        return done

    def release(self) -> None:
        global _active
        with _lock:
            if _active is self:
                _active = None
        self._done.set()


def _before_step(optimizer: Optimizer, args: Any, kwargs: Any) -> None:
    guard = _active
    if guard is not None:
        guard.wait(record=True)


def _install_hook() -> None:
    global _hook_installed
    with _lock:
        if _hook_installed:
            return
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(_before_step)
        _hook_installed = True
