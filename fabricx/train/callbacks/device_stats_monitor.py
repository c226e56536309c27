"""``DeviceStatsMonitor``: log the device's memory statistics (and CPU load) around every batch."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

import torch

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.trainer_state import batches_that_stepped, logs_this_step
from fabricx.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


def get_cpu_stats() -> dict[str, float]:
    """Memory, CPU and swap use in percent, from ``psutil`` (Lightning's key names)."""
    if importlib.util.find_spec("psutil") is None:
        raise ModuleNotFoundError("Fetching CPU device stats requires `psutil` to be installed: pip install psutil")
    import psutil

    return {
        "cpu_vm_percent": psutil.virtual_memory().percent,
        "cpu_percent": psutil.cpu_percent(),
        "cpu_swap_percent": psutil.swap_memory().percent,
    }


def get_device_stats(device: torch.device) -> dict[str, Any]:
    """What Lightning's accelerators report for ``device``: ``torch.cuda.memory_stats`` on CUDA, psutil on CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_stats(device)
    if device.type == "mps":
        return {
            "mps.current_allocated_bytes": torch.mps.current_allocated_memory(),
            "mps.driver_allocated_bytes": torch.mps.driver_allocated_memory(),
        }
    return get_cpu_stats()


class DeviceStatsMonitor(Callback):
    """Log device statistics at the start and end of every train/validation/test batch, on logging steps.

    Keys are ``DeviceStatsMonitor.<hook>/<stat>`` (the logger's group separator). On CPU the stats are
    psutil's (``cpu_stats=False`` turns them off); on a GPU ``cpu_stats=True`` adds them.

    Example:

    ```python
    Trainer(accelerator="cuda", callbacks=[DeviceStatsMonitor(cpu_stats=True)])
    ```
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationException("Cannot use `DeviceStatsMonitor` callback with `Trainer(logger=False)`.")
        device = trainer.strategy.root_device
        if self._cpu_stats is None and device.type == "cpu" and importlib.util.find_spec("psutil") is None:
            raise ModuleNotFoundError("`DeviceStatsMonitor` cannot log CPU stats as `psutil` is not installed.")

    def _get_and_log_device_stats(self, trainer: Trainer, key: str) -> None:
        if not logs_this_step(trainer):
            return
        device = trainer.strategy.root_device
        if self._cpu_stats is False and device.type == "cpu":
            return
        accelerator_stats = getattr(trainer.accelerator, "get_device_stats", None)
        stats = dict(accelerator_stats(device) if accelerator_stats is not None else get_device_stats(device))
        if self._cpu_stats and device.type != "cpu":
            stats.update(get_cpu_stats())
        prefix = f"{type(self).__qualname__}.{key}"
        step = batches_that_stepped(trainer)
        for logger in trainer.loggers:
            separator = logger.group_separator
            logger.log_metrics({f"{prefix}{separator}{k}": v for k, v in stats.items()}, step=step)

    def on_train_batch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_train_batch_end")

    def on_validation_batch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_validation_batch_start")

    def on_validation_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_validation_batch_end")

    def on_test_batch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_test_batch_start")

    def on_test_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        self._get_and_log_device_stats(trainer, "on_test_batch_end")
