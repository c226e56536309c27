"""Moving nested collections of tensors between devices."""

from __future__ import annotations

import functools
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection


def move_data_to_device(data: Any, device: torch.device | str) -> Any:
    """Move every tensor inside a nested collection to ``device``.

    Example:
        ```python
        batch = move_data_to_device({"x": torch.ones(2), "ids": [torch.zeros(1)]}, "cpu")
        ```
    """
    device = torch.device(device)
    non_blocking = device.type == "cuda"

    def move(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device, non_blocking=non_blocking)

    return apply_to_collection(data, torch.Tensor, move)


def convert_to_tensors(data: Any, device: torch.device | str) -> Any:
    """Turn the numbers and NumPy arrays in a nested collection into tensors on ``device``.

    The dtypes are the ones Lightning Fabric's collectives use: ``bool`` becomes ``uint8`` (NCCL has no
    bool), ``int`` becomes ``int32``, ``float`` becomes ``float32``; tensors already there are moved.

    Example:
        ```python
        convert_to_tensors({"loss": 1.5, "count": 3}, "cpu")  # tensor(1.5) and tensor(3, dtype=torch.int32)
        ```
    """
    import numpy as np

    for kind, dtype in ((bool, torch.uint8), (int, torch.int), (float, torch.float)):
        data = apply_to_collection(data, kind, functools.partial(torch.tensor, dtype=dtype, device=device))
    data = apply_to_collection(data, np.ndarray, lambda array: torch.from_numpy(array).to(device))
    return move_data_to_device(data, device)
