"""`DataModule.from_datasets` and `str(datamodule)`: DataModule loaders made from, and described by, datasets."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sized
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

_METHODS = (
    ("Train dataloader", "train_dataloader"),
    ("Validation dataloader", "val_dataloader"),
    ("Test dataloader", "test_dataloader"),
    ("Predict dataloader", "predict_dataloader"),
)


def _map_datasets(value: Any, function: Callable[[Any], Any]) -> Any:
    if isinstance(value, Dataset):
        return function(value)
    if isinstance(value, Mapping):
        return {key: _map_datasets(item, function) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_datasets(item, function) for item in value)
    return value


def loader_method(datasets: Any, batch_size: int, num_workers: int, shuffle: bool) -> Callable[[], Any]:
    """A `*_dataloader()` method returning a `DataLoader` per dataset of `datasets` (same shape)."""

    def loader(dataset: Any) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle and not isinstance(dataset, IterableDataset),
            num_workers=num_workers,
            pin_memory=True,
        )

    return lambda: _map_datasets(datasets, loader)


def init_arguments(cls: type, **candidates: Any) -> dict[str, Any]:
    """The `candidates` that `cls.__init__` takes (all of them when it takes `**kwargs`)."""
    parameters = inspect.signature(cls.__init__).parameters
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
        return dict(candidates)
    return {name: value for name, value in candidates.items() if name in parameters and name != "self"}


def _size(loader: Any) -> str:
    dataset = getattr(loader, "dataset", None)
    return str(len(dataset)) if isinstance(dataset, Sized) else "NA"


def describe_loaders(datamodule: Any) -> str:
    """`{Train dataloader: size=64}` per loader method, one per line (`None` where a method gives nothing)."""
    lines = []
    for title, name in _METHODS:
        try:
            loaders = getattr(datamodule, name)()
        except Exception:  # as Lightning: a method that cannot give its loaders yet is "None"
            loaders = None
        if isinstance(loaders, DataLoader):
            text = f"size={_size(loaders)}"
        elif isinstance(loaders, (list, tuple, Mapping)) and loaders:
            items = loaders.values() if isinstance(loaders, Mapping) else loaders
            text = " ; ".join(f"{i}. size={_size(loader)}" for i, loader in enumerate(items, start=1))
        else:
            text = "None"
        lines.append(f"{{{title}: {text}}}")
    return os.linesep.join(lines)


__all__ = ["describe_loaders", "init_arguments", "loader_method"]
