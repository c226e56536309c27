"""One process on one device."""

from __future__ import annotations

import torch

from fabricx.accelerators.accelerator import Accelerator
from fabricx.precision.precision import Precision
from fabricx.strategies.strategy import Strategy


class SingleDeviceStrategy(Strategy):
    """Everything in this process, on one device.

    Example:
        ```python
        Fabric(strategy=SingleDeviceStrategy(device="cuda:1"))
        ```
    """

    strategy_name = "single_device"
    allows_repeated_module_setup = True

    def __init__(
        self,
        device: str | torch.device = "cpu",
        accelerator: Accelerator | None = None,
        precision: Precision | None = None,
    ) -> None:
        super().__init__(accelerator=accelerator, precision=precision)
        self._root_device = torch.device(device)

    @property
    def root_device(self) -> torch.device:
        return self._root_device

    def __repr__(self) -> str:
        return f"SingleDeviceStrategy(device={str(self._root_device)!r})"
