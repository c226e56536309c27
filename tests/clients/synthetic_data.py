"""Offline stand-ins for what clients download, given to their code in place of the download's import.

Only the data source changes: a stand-in has the name, the signature and the sizes the client's code and tests
read, and its contents are random (seeded) instead of the real images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch.utils.data import Dataset

_MNIST_SIZES = {True: 60_000, False: 10_000}
#: Rows of the Hugging Face stand-in's splits: fewer than MNIST's, as every image is encoded to PNG as the Hub's are.
_HF_MNIST_ROWS = {"train": 1_280, "test": 320}


class MNIST(Dataset):
    """torchvision's `MNIST(root, train, transform, download)` with random 28x28 digits; `download` makes its folder.

    Example:
        ```python
        image, label = MNIST("data", train=False, download=True)[0]  # a 28x28 uint8 tensor, an int in 0-9
        ```
    """

    def __init__(
        self, root: str | Path, train: bool = True, transform: Callable | None = None, download: bool = False
    ) -> None:
        if download:
            (Path(root) / "MNIST" / "raw").mkdir(parents=True, exist_ok=True)
        generator = torch.Generator().manual_seed(int(train))
        count = _MNIST_SIZES[train]
        self.data = torch.randint(0, 256, (count, 28, 28), dtype=torch.uint8, generator=generator)
        self.targets = torch.randint(0, 10, (count,), generator=generator)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.data[index]
        return (self.transform(image) if self.transform else image), int(self.targets[index])


class _Compose:
    def __init__(self, steps: Sequence[Callable]) -> None:
        self.steps = list(steps)

    def __call__(self, value: Any) -> Any:
        for step in self.steps:
            value = step(value)
        return value


class _ToTensor:
    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.unsqueeze(0).float().div(255)


class _Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean, self.std = torch.tensor(mean).view(-1, 1, 1), torch.tensor(std).view(-1, 1, 1)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return (image - self.mean) / self.std


# The part of `torchvision.transforms` the clients use, for the uint8 tensors the stand-ins hold (classes, so
# that spawned processes can pickle them).
transforms = SimpleNamespace(Compose=_Compose, ToTensor=_ToTensor, Normalize=_Normalize)


def load_dataset(path: str, split: str, token: bool | str | None = None) -> Any:
    """`datasets.load_dataset("mnist", split=...)` offline: a `datasets.Dataset` with the Hub's MNIST features.

    Its columns are `image` (`datasets.Image`, 28x28 grey PNGs decoded to PIL images) and `label` (a `ClassLabel`
    named "0" to "9"), as the Hub's, with `_HF_MNIST_ROWS` rows of random (seeded) digits.

    Example:
        ```python
        row = load_dataset("mnist", split="test")[0]  # {"image": <PIL.Image 28x28>, "label": 7}
        ```
    """
    import datasets  # only the clients that read from the Hub install it (`make clients`)

    if path != "mnist" or split not in _HF_MNIST_ROWS:
        raise ValueError(f"the stand-in has the splits {sorted(_HF_MNIST_ROWS)} of 'mnist', not {split!r} of {path!r}")
    count = _HF_MNIST_ROWS[split]
    generator = torch.Generator().manual_seed(len(split))
    images = torch.randint(0, 256, (count, 28, 28), dtype=torch.uint8, generator=generator).numpy()
    labels = torch.randint(0, 10, (count,), generator=generator).tolist()
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=[str(digit) for digit in range(10)])}
    )
    return datasets.Dataset.from_dict({"image": list(images), "label": labels}, features=features, split=split)
