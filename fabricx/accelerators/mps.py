"""Apple silicon GPUs through ``torch.backends.mps``."""

from __future__ import annotations

import platform

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
    device_type = "mps"

    @staticmethod
    def is_available() -> bool:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps and mps.is_available() and platform.processor() in ("arm", "arm64"))

    @staticmethod
    def auto_device_count() -> int:
        return 1 if MPSAccelerator.is_available() else 0
