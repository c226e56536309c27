"""The batch-transfer hooks: ``on_before_batch_transfer``, ``transfer_batch_to_device``, ``on_after_batch_transfer``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fabricx.utilities.apply import move_data_to_device

_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def move_to_device(batch: Any, device: Any) -> Any:
    """Every tensor in ``batch`` moved to ``device``."""
    return move_data_to_device(batch, device)


def _owner(name: str, module: Any, datamodule: Any) -> Any:
    """Whose hook runs: the datamodule's when it overrides it, else the module's (Lightning's rule); the
    module's runs as its current hook (``self.log`` refuses there, as in Lightning)."""
    from fabricx.train.data.datamodule import DataModule
    from fabricx.train.module.current_hook import named_hook
    from fabricx.train.module.module import TrainModule
    from fabricx.train.module.overrides import is_overridden

    # As Lightning: a datamodule's hook counts when its code differs from DataModule's (a wrapper made with
    # functools.partial/wraps around the inherited one does not).
    if isinstance(datamodule, DataModule) and is_overridden(name, datamodule, DataModule):
        return getattr(datamodule, name)
    if isinstance(module, TrainModule):
        method = getattr(module, name, None)
        # Overridden in the class, or replaced on the instance (a wrapper without __func__): the module's hook
        # always runs in Lightning, so any replacement of it is called.
        if callable(method) and getattr(method, "__func__", None) is not getattr(TrainModule, name, None):
            return named_hook(module, name, method)
    return None


def batch_processor(module: Any, datamodule: Any, device: Any) -> Callable[[Any, int], Any] | None:
    """A function applying the overridden transfer hooks to a batch, or ``None`` when none is overridden
    (the loader then moves batches itself).

    Example:
        ```python
        process = batch_processor(module, datamodule, fabric.device)
        batch = process(batch, 0) if process is not None else batch
        ```
    """
    before, transfer, after = (_owner(name, module, datamodule) for name in _HOOKS)
    if before is None and transfer is None and after is None:
        return None

    def process(batch: Any, dataloader_idx: int) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = transfer(batch, device, dataloader_idx) if transfer is not None else move_to_device(batch, device)
        if after is not None:
            batch = after(batch, dataloader_idx)
        return batch

    return process


__all__ = ["batch_processor", "move_to_device"]
