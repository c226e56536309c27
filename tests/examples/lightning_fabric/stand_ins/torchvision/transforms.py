"""``ToTensor``, ``Normalize`` and ``Compose`` as the MNIST examples use them."""

from __future__ import annotations

from typing import Any

import torch


class ToTensor:
    def __call__(self, image: Any) -> torch.Tensor:
        return image.float().div(255).unsqueeze(0) if image.dim() == 2 else image.float().div(255)


class Normalize:
    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.mean, self.std = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return (tensor - self.mean) / self.std


class Compose:
    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value
