"""TPUs through torch_xla, imported only when asked for."""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import torch

from fabricx.accelerators.accelerator import Accelerator


class XLAAccelerator(Accelerator):
    """TPU cores via ``torch_xla`` (``pip install torch_xla``).

    Example:
        ```python
        Fabric(accelerator="tpu", devices=8)
        ```
    """

    name = "tpu"

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def is_available() -> bool:
        if importlib.util.find_spec("torch_xla") is None:
            return False
        try:
            xr = importlib.import_module("torch_xla.runtime")  # optional: only on TPU machines
            return xr.device_type() in ("TPU", "NEURON", "CUDA") and xr.global_runtime_device_count() > 0
        except Exception:  # a broken runtime is the same as no TPU
            return False

    @staticmethod
    def auto_device_count() -> int:
        if not XLAAccelerator.is_available():
            return 0
        xr = importlib.import_module("torch_xla.runtime")
        return xr.addressable_runtime_device_count()

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        indices = range(devices) if isinstance(devices, int) else devices
        return [torch.device("xla", i) for i in indices]
