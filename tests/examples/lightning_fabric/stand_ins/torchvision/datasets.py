"""``MNIST`` with synthetic digits: a fixed generator draws the same images and labels everywhere.

Each class has its own mean image, so a small network learns something and the losses move.
``FABRICX_STANDIN_MNIST_SIZE`` sets the training-set size (the test set is a quarter of it).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import Dataset


class MNIST(Dataset):
    def __init__(self, root: str, train: bool = True, download: bool = False, transform: Any = None) -> None:
        size = int(os.environ.get("FABRICX_STANDIN_MNIST_SIZE", "256"))
        size = size if train else max(1, size // 4)
        generator = torch.Generator().manual_seed(0 if train else 1)
        prototypes = torch.randint(0, 256, (10, 28, 28), generator=torch.Generator().manual_seed(2))
        self.targets = torch.randint(0, 10, (size,), generator=generator)
        noise = torch.randint(-60, 60, (size, 28, 28), generator=generator)
        self.data = (prototypes[self.targets] + noise).clamp(0, 255).to(torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.targets[index])


class CelebA(Dataset):
    """Synthetic 64x64 RGB "faces": smooth random colour fields, ``FABRICX_STANDIN_CELEBA_SIZE`` of them."""

    def __init__(self, root: str, split: str = "train", download: bool = False, transform: Any = None) -> None:
        size = int(os.environ.get("FABRICX_STANDIN_CELEBA_SIZE", "16"))
        generator = torch.Generator().manual_seed(3)
        coarse = torch.rand(size, 3, 8, 8, generator=generator)
        fine = torch.nn.functional.interpolate(coarse, size=(64, 64), mode="bilinear", align_corners=False)
        self.data = (fine * 255).round().to(torch.uint8)
        self.attr = torch.randint(0, 2, (size, 40), generator=generator)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, torch.Tensor]:
        image = self.data[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.attr[index]
