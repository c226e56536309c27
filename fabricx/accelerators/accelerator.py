"""The hardware abstraction: which devices exist and how ``devices=`` is read."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from fabricx.utilities.exceptions import MisconfigurationError


class Accelerator(ABC):
    """One kind of hardware. Subclasses say whether it exists, how many devices it has,
    and how to turn a ``devices=`` flag into a list of ``torch.device``.

    Example:
        ```python
        from fabricx.accelerators import CPUAccelerator
        CPUAccelerator.parse_devices(2)  # 2
        ```
    """

    name: str = ""
    #: The type of its ``torch.device`` objects (``"cuda"``, ``"xla"`` for the ``"tpu"`` accelerator).
    device_type: str = ""

    @staticmethod
    @abstractmethod
    def is_available() -> bool:
        """Whether this kind of hardware can be used in this process."""

    @staticmethod
    @abstractmethod
    def auto_device_count() -> int:
        """How many devices ``devices="auto"`` means."""

    @classmethod
    def parse_devices(cls, devices: Any) -> Any:
        """Normalise a ``devices=`` flag: an int count or a list of indices."""
        return _parse_gpu_ids(devices, cls.name, cls.auto_device_count())

    @classmethod
    def get_parallel_devices(cls, devices: Any) -> list[torch.device]:
        """The ``torch.device`` of each local process for a parsed ``devices`` value (a count or indices)."""
        indices = range(devices) if isinstance(devices, int) else devices
        return [torch.device(cls.device_type, i) for i in indices]

    def setup_device(self, device: torch.device) -> None:
        """Prepare ``device`` for use by this process (e.g. make it the current CUDA device)."""

    def teardown(self) -> None:
        """Release what ``setup_device`` took."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _parse_gpu_ids(devices: Any, name: str, available: int) -> list[int]:
    """Turn ``"auto"``, ``-1``, ``2``, ``"0,1"``, ``"2"``, ``[0, 1]`` into a list of device indices."""
    given = devices
    if isinstance(devices, str):
        text = devices.strip()
        if text == "auto" or text == "-1":
            devices = -1
        elif "," in text:
            devices = [int(part) for part in text.split(",") if part.strip()]
        elif text.lstrip("-").isdigit():
            devices = int(text)
        else:
            raise MisconfigurationError(
                f"devices={given!r} is not understood. Use an int (how many), -1 or 'auto' (all), "
                "a list of indices like [0, 1], or a string like '0,1'."
            )
    if isinstance(devices, bool) or not isinstance(devices, int | list | tuple):
        raise MisconfigurationError(
            f"devices={given!r} has type {type(given).__name__}; use an int, a list of ints or a string."
        )
    if isinstance(devices, int):
        if devices == -1:
            if available == 0:
                raise MisconfigurationError(f"devices={given!r} asks for every {name} device but none exists.")
            return list(range(available))
        if devices <= 0:
            raise MisconfigurationError(
                f"devices={given!r} is not allowed: ask for at least 1 device, or -1/'auto' for all."
            )
        if devices > available:
            raise MisconfigurationError(
                f"devices={given!r} asks for {devices} {name} devices but {available} are available."
            )
        return list(range(devices))
    indices = list(devices)
    if not indices:
        raise MisconfigurationError(f"devices={given!r} is an empty list; name at least one device index.")
    if len(set(indices)) != len(indices):
        raise MisconfigurationError(f"devices={given!r} names a device more than once.")
    bad = [i for i in indices if not isinstance(i, int) or i < 0 or i >= available]
    if bad:
        raise MisconfigurationError(
            f"devices={given!r} names {name} device(s) {bad}, but the valid indices are 0..{available - 1}."
        )
    return indices
