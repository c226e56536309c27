"""Moving nested collections of tensors between devices."""

from __future__ import annotations

from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection


def move_data_to_device(data: Any, device: torch.device | str) -> Any:
    """Move every tensor inside a nested collection to ``device``.

    Example::

        batch = move_data_to_device({"x": torch.ones(2), "ids": [torch.zeros(1)]}, "cpu")
    """
    device = torch.device(device)
    non_blocking = device.type == "cuda"

    def move(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device, non_blocking=non_blocking)

    return apply_to_collection(data, torch.Tensor, move)
