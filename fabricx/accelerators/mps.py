"""Apple silicon GPUs through ``torch.backends.mps``."""

from __future__ import annotations

import platform
from typing import Any

import torch

from fabricx.accelerators.accelerator import Accelerator


class MPSAccelerator(Accelerator):
    """The Apple GPU (one device).

    Example:
        ```python
        Fabric(accelerator="mps")
        ```
    """

    name = "mps"

    @staticmethod
    def is_available() -> bool:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps and mps.is_available() and platform.processor() in ("arm", "arm64"))

    @staticmethod
    def auto_device_count() -> int:
        return 1 if MPSAccelerator.is_available() else 0

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        indices = range(devices) if isinstance(devices, int) else devices
        return [torch.device("mps", i) for i in indices]
