"""``ToTensor``, ``Normalize``, ``Resize``, ``CenterCrop`` and ``Compose`` as the examples use them."""

from __future__ import annotations

from typing import Any

import numpy
import torch


class ToTensor:
    def __call__(self, image: Any) -> torch.Tensor:
        if not isinstance(image, torch.Tensor):  # a PIL image, as Hugging Face's datasets decode them
            image = torch.from_numpy(numpy.array(image))
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


class Resize:
    """Scales the shorter side of a ``(C, H, W)`` tensor to ``size``, keeping the aspect ratio."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        if min(height, width) == self.size:
            return image
        scale = self.size / min(height, width)
        target = (round(height * scale), round(width * scale))
        resized = torch.nn.functional.interpolate(image[None].float(), size=target, mode="bilinear")
        return resized[0].round().clamp(0, 255).to(image.dtype)


class CenterCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        top, left = (height - self.size) // 2, (width - self.size) // 2
        return image[..., top : top + self.size, left : left + self.size]
