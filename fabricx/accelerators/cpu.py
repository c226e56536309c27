"""CPU: ``devices=N`` means N processes on this machine."""

from __future__ import annotations

import os
from typing import Any

import torch

from fabricx.accelerators.accelerator import Accelerator
from fabricx.utilities.exceptions import MisconfigurationError


class CPUAccelerator(Accelerator):
    """The CPU. Always available; ``devices`` counts processes, not cores.

    Example:
        ```python
        Fabric(accelerator="cpu", devices=2)  # two processes
        ```
    """

    name = "cpu"
    device_type = "cpu"

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @classmethod
    def parse_devices(cls, devices: Any) -> int:
        given = devices
        if isinstance(devices, str):
            text = devices.strip()
            if text in ("auto", "-1"):
                return 1
            if "," in text:
                raise MisconfigurationError(
                    f"devices={given!r}: on CPU, devices is a number of processes, not a list of indices."
                )
            if not text.lstrip("-").isdigit():
                raise MisconfigurationError(f"devices={given!r} is not understood; on CPU give an int >= 1.")
            devices = int(text)
        if isinstance(devices, list | tuple):
            raise MisconfigurationError(
                f"devices={given!r}: on CPU, devices is a number of processes; use devices={len(devices)}."
            )
        if isinstance(devices, bool) or not isinstance(devices, int):
            raise MisconfigurationError(f"devices={given!r} must be an int >= 1 on CPU.")
        if devices == -1:
            return max(1, os.cpu_count() or 1)
        if devices <= 0:
            raise MisconfigurationError(
                f"devices={given!r} is not allowed: on CPU give the number of processes (>= 1), or 'auto'."
            )
        return devices

    @classmethod
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
        count = devices if isinstance(devices, int) else len(devices)
        return [torch.device("cpu")] * count
