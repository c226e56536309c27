"""NVIDIA (and ROCm) GPUs through ``torch.cuda``."""

from __future__ import annotations

import torch

from fabricx.accelerators.accelerator import Accelerator


class CUDAAccelerator(Accelerator):
    """CUDA GPUs. ``devices`` is a count or a list of indices.

    Example:
        ```python
        Fabric(accelerator="cuda", devices=[0, 1])
        ```
    """

    name = "cuda"
    device_type = "cuda"

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()

    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def teardown(self) -> None:
        torch.cuda.empty_cache()
